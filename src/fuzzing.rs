//! The bodies of the fuzz targets in `fuzz/` and the invariants they check,
//! in one place: the coverage-guided targets call these functions, and
//! `tests/fuzz_regressions.rs` replays every committed seed and crash input
//! through them, so the invariants hold in CI too (README, Fuzzing).
//!
//! Each function takes the raw bytes of one input, builds the gateway's
//! input from them (a line-oriented text format, so seeds are readable and
//! mutations stay meaningful), calls the gateway's own code and panics when
//! an invariant is broken. Not part of the gateway's API.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, TRANSFER_ENCODING};
use ipnet::IpNet;
use tokio::io::{AsyncRead, ReadBuf};
use tollgate_limit::headers::Draft;
use tollgate_limit::store::redis;
use tollgate_limit::{Figure, Outcome, Status};

use crate::admission;
use crate::client_addr::{self, canonical_ip, group_ipv6, is_trusted, Client};
use crate::config::{self, HeaderStyle, KeySource, OnMissingKey, PathMatch};
use crate::limit::headers::{
    add_headers, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING,
    X_RATELIMIT_RESET,
};
use crate::limit::key::{self, KeyDomain, KeyOutcome, KeyPrefix, RequestView};
use crate::route::normalise::{normalise_path, EscapedSlashes, NormaliseError};
use crate::server::sniff::{Framing, SniffIo};

mod jwt;
mod llm;
pub use jwt::jwt;
pub use llm::{llm_request, llm_stream};

/// The lines of an input (split on `\n`); a missing line is empty.
struct Lines<'a>(std::slice::Split<'a, u8, fn(&u8) -> bool>);

impl<'a> Lines<'a> {
    fn new(data: &'a [u8]) -> Self {
        Lines(data.split((|b| *b == b'\n') as fn(&u8) -> bool))
    }

    fn bytes(&mut self) -> &'a [u8] {
        self.0.next().unwrap_or_default()
    }

    fn text(&mut self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.bytes())
    }
}

/// An address written as text, or `None`.
fn ip_of(text: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

// ---------------------------------------------------------------- config

/// The fixed environment `${VAR}` reads while fuzzing, so a run is
/// reproducible.
fn fuzz_env(name: &str) -> Option<String> {
    match name {
        "PORT" => Some("8080".into()),
        "HOST" => Some("127.0.0.1".into()),
        "REDIS_URL" => Some("redis://127.0.0.1:6379".into()),
        "TOKEN" => Some("s3cret".into()),
        _ => None,
    }
}

/// `config`: the input is a config file's text. Parsing never panics; an
/// error names a real line and column and says something; a valid config
/// only refers to limits and upstreams it defines, its names use the
/// allowed characters, and a route path that is not normalised (so could
/// never match) is refused, by validation or when the runtime is built.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Lines as YAML 1.1 (libyaml) counts them: CRLF, CR, LF, and NEL, LS
    // and PS too.
    let lines = 1 + text
        .replace("\r\n", "\n")
        .matches(['\r', '\n', '\u{85}', '\u{2028}', '\u{2029}'])
        .count();
    match config::parse_with_env(text, "fuzz.yaml", &fuzz_env) {
        Err(err) => {
            assert!(!err.message.is_empty(), "an error says what is wrong");
            assert_eq!(err.file, "fuzz.yaml");
            if let Some(line) = err.line {
                // Expansion never adds lines (no variable holds a newline);
                // a parser may point just past the last line.
                assert!((1..=lines + 1).contains(&line), "line {line} of {lines}");
            }
            assert!(err.column.is_none_or(|c| c >= 1));
            assert!(err.to_string().contains("fuzz.yaml"));
        }
        Ok(loaded) => {
            let c = &loaded.config;
            assert_eq!(loaded.sha256.len(), 64);
            let is_name = |n: &str| {
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            };
            for limit in &c.limits {
                assert!(is_name(&limit.name), "limit name {:?}", limit.name);
                assert!(!limit.key.is_empty(), "limit {} has a key", limit.name);
            }
            for up in &c.upstreams {
                assert!(is_name(&up.name), "upstream name {:?}", up.name);
                assert!(!up.targets.is_empty(), "upstream {} has targets", up.name);
            }
            assert!(c.server.ipv6_prefix <= 128);
            // A route path no request normalises to never matches: the
            // runtime refuses the config (validation catches most sooner).
            let paths_ok = crate::runtime::check_route_paths(c).is_ok();
            for route in &c.routes {
                assert!(is_name(&route.name), "route name {:?}", route.name);
                for name in &route.limits {
                    assert!(c.limits.iter().any(|l| &l.name == name), "limit {name}");
                }
                if let config::RouteAction::Upstream(name) = &route.action {
                    assert!(
                        c.upstreams.iter().any(|u| &u.name == name),
                        "upstream {name}"
                    );
                }
                if let PathMatch::Prefix(p) | PathMatch::Exact(p) = &route.path {
                    let normalised = normalise_path(p, c.server.escaped_slashes);
                    assert!(
                        normalised.as_deref() == Ok(p.as_str()) || !paths_ok,
                        "route path {p:?} normalises to {normalised:?} and is accepted"
                    );
                }
                assert!(route.line <= lines, "route line {} of {lines}", route.line);
            }
        }
    }
}

// ------------------------------------------------------------------ path

/// `path`: the input is a request path, normalised in each
/// `escaped_slashes` mode. The normaliser accepts exactly what a plain
/// reference reading of docs/protocols.md accepts (segment by segment with a stack),
/// and returns what it returns; what it returns is canonical: it starts
/// with `/`, has no empty, `.` or `..` segment, only characters a path may
/// hold, uppercase escapes of reserved bytes only (never `%2F` or `%5C`
/// unless the mode is `keep`), and normalising it again gives it back
/// unchanged.
pub fn path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for mode in [
        EscapedSlashes::Reject,
        EscapedSlashes::Decode,
        EscapedSlashes::Keep,
    ] {
        let got = normalise_path(text, mode);
        let want = reference_normalise(text.as_bytes(), mode);
        assert_eq!(
            got.as_deref().ok(),
            want.as_deref().ok(),
            "{mode:?}: {got:?} against the reference's {want:?}"
        );
        if let Ok(p) = got {
            check_canonical_path(&p, mode);
        }
    }
}

/// The invariants of a path normalised under `mode` (see [`path`]).
pub fn check_canonical_path(p: &str, mode: EscapedSlashes) {
    let b = p.as_bytes();
    assert_eq!(b.first(), Some(&b'/'), "{p:?} starts with /");
    assert!(!p.contains("//"), "{p:?} has an empty segment");
    for seg in p[1..].split('/') {
        assert!(seg != "." && seg != "..", "{p:?} has a dot segment");
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).expect("two hex digits");
            assert!(
                hex.iter().all(|h| matches!(h, b'0'..=b'9' | b'A'..=b'F')),
                "{p:?}: escapes are uppercase"
            );
            let v = u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("zz"), 16)
                .expect("hex digits");
            assert!(!unreserved(v), "{p:?}: unreserved bytes are not escaped");
            assert!(
                mode == EscapedSlashes::Keep || !matches!(v, b'/' | b'\\'),
                "{p:?}: no escaped slash outside keep"
            );
            i += 3;
            continue;
        }
        assert!(b[i] == b'/' || pchar(b[i]), "{p:?}: byte {:#x}", b[i]);
        i += 1;
    }
    assert_eq!(
        normalise_path(p, mode),
        Ok(Cow::Borrowed(p)),
        "normalising is idempotent"
    );
}

/// RFC 3986 `unreserved`.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` less `pct-encoded`.
fn pchar(b: u8) -> bool {
    unreserved(b) || b"!$&'()*+,;=:@".contains(&b)
}

/// docs/protocols.md read plainly. First, over the whole path: a `%` without two hex
/// digits, an encoded control byte, a raw `\\`, and decoded bytes that are
/// not UTF-8 are errors; `%2F`/`%5C` are an error (`reject`), become `/`
/// (`decode`) or stay (`keep`); outside `keep`, `%25` before two hex digits
/// (written or encoded) is an error. Then each segment's escapes decoded
/// when unreserved and uppercased otherwise, printable ASCII a path may not
/// hold escaped, then `.`/`..` resolved on a stack of segments; a trailing
/// slash (or a final dot segment) keeps a trailing slash.
fn reference_normalise(path: &[u8], mode: EscapedSlashes) -> Result<String, NormaliseError> {
    let Some((b'/', _)) = path.split_first() else {
        return Err(NormaliseError::InvalidCharacter);
    };
    let escape = |i: usize| -> Option<u8> {
        let h = std::str::from_utf8(path.get(i + 1..i + 3)?).ok()?;
        h.bytes()
            .all(|c| c.is_ascii_hexdigit())
            .then(|| u8::from_str_radix(h, 16).ok())
            .flatten()
    };
    // What each position decodes to, once, and how long its spelling is.
    let mut decoded = Vec::new();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            let v = escape(i).ok_or(NormaliseError::BadPercentEncoding)?;
            decoded.push(v);
            spans.push((i, 3, true));
            i += 3;
        } else {
            decoded.push(path[i]);
            spans.push((i, 1, false));
            i += 1;
        }
    }
    std::str::from_utf8(&decoded).map_err(|_| NormaliseError::InvalidUtf8)?;
    let mut slashed = Vec::new();
    for (k, (&v, &(at, len, escaped))) in decoded.iter().zip(&spans).enumerate() {
        if !escaped {
            if v == b'\\' {
                return Err(NormaliseError::Backslash);
            }
            slashed.push(v);
            continue;
        }
        if v < 0x20 || v == 0x7F {
            return Err(NormaliseError::EncodedControl);
        }
        let hex_follows = decoded
            .get(k + 1..k + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
        match (v, mode) {
            (b'/' | b'\\', EscapedSlashes::Reject) => return Err(NormaliseError::EscapedSlash),
            (b'/' | b'\\', EscapedSlashes::Decode) => slashed.push(b'/'),
            (b'%', EscapedSlashes::Reject | EscapedSlashes::Decode) if hex_follows => {
                return Err(NormaliseError::DoubleEncoding)
            }
            _ => slashed.extend_from_slice(&path[at..at + len]),
        }
    }
    let mut stack: Vec<String> = Vec::new();
    let mut ends_in_segment = false;
    for raw in slashed[1..].split(|b| *b == b'/') {
        let seg = reference_segment(raw)?;
        ends_in_segment = false;
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                stack.pop().ok_or(NormaliseError::DotDotAboveRoot)?;
            }
            _ => {
                stack.push(seg);
                ends_in_segment = true;
            }
        }
    }
    let mut out = format!("/{}", stack.join("/"));
    if !ends_in_segment && !stack.is_empty() {
        out.push('/');
    }
    Ok(out)
}

fn reference_segment(raw: &[u8]) -> Result<String, NormaliseError> {
    let mut out = String::new();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            let v = raw
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(NormaliseError::BadPercentEncoding)?;
            if unreserved(v) {
                out.push(char::from(v));
            } else {
                out.push_str(&format!("%{v:02X}"));
            }
            i += 3;
            continue;
        }
        if pchar(b) {
            out.push(char::from(b));
        } else if b.is_ascii_graphic() && !b"%/?#".contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            return Err(NormaliseError::InvalidCharacter);
        }
        i += 1;
    }
    Ok(out)
}

// ------------------------------------------------------------------- xff

/// `xff`: line 1 is the TCP peer (else `10.0.0.1`), line 2 the trusted
/// proxies, comma-separated (else `10.0.0.0/8, 2001:db8::/32`), every
/// further line one `X-Forwarded-For` field. The client is always the peer
/// or an address of the chain; an untrusted peer is always the client; and
/// the walk never skips an untrusted hop: every hop right of the client is
/// a trusted address (docs/configuration/limits.md).
pub fn xff(data: &[u8]) {
    let mut lines = Lines::new(data);
    let peer = ip_of(lines.bytes()).unwrap_or(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let trusted_line = lines.text();
    let mut trusted: Vec<IpNet> = trusted_line
        .split(',')
        .filter_map(|n| {
            let n = n.trim();
            n.parse::<IpNet>()
                .ok()
                .or_else(|| n.parse::<IpAddr>().ok().map(IpNet::from))
        })
        .collect();
    if trusted_line.trim().is_empty() {
        trusted = ["10.0.0.0/8", "2001:db8::/32"]
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
    }
    let mut headers = HeaderMap::new();
    for line in lines.0 {
        if let Ok(v) = HeaderValue::from_bytes(line) {
            headers.append("x-forwarded-for", v);
        }
    }

    let got = client_addr::client_addr(peer, &headers, &trusted);
    let client = Client::identify(peer, &headers, &trusted);
    let peer = canonical_ip(peer);
    assert_eq!(client.addr, got);
    assert_eq!(client.peer, peer);
    assert_eq!(client.trusted, is_trusted(peer, &trusted));
    assert_eq!(canonical_ip(got), got, "the client is in canonical form");
    for prefix in [0, 1, 48, 64, 127, 128, u8::MAX] {
        let g = group_ipv6(got, prefix);
        assert_eq!(group_ipv6(g, prefix), g, "grouping is idempotent");
    }
    if !client.trusted {
        assert_eq!(got, peer, "an untrusted peer is the client");
        return;
    }

    // The hops as the walk meets them, leftmost first, the peer last; a
    // hop that is not an address (or not text) is `None`.
    let mut hops: Vec<Option<IpAddr>> = Vec::new();
    for field in headers.get_all("x-forwarded-for") {
        hops.extend(
            field
                .as_bytes()
                .split(|b| *b == b',')
                .map(|e| e.trim_ascii())
                .filter(|e| !e.is_empty())
                .map(|e| std::str::from_utf8(e).ok().and_then(loose_ip)),
        );
    }
    hops.push(Some(peer));
    // From the right, the first hop that is not a trusted address: the
    // client is that address, or right of it (the gateway's stricter entry
    // syntax may stop sooner), never left of it.
    let trusted_hop = |h: &Option<IpAddr>| h.is_some_and(|ip| is_trusted(ip, &trusted));
    let first = match hops.iter().rposition(|h| !trusted_hop(h)) {
        None => 0,
        Some(k) if hops[k].is_some() => k,
        Some(k) => k + 1,
    };
    assert!(
        hops[first..].contains(&Some(got)),
        "client {got} for hops {hops:?} (trusted {trusted:?}): not at or right of hop {first}"
    );
}

/// An `X-Forwarded-For` entry read loosely: an address, `[v6]` with
/// anything after it, or anything `:port`. Takes everything the gateway's
/// strict reading takes, to the same address.
fn loose_ip(entry: &str) -> Option<IpAddr> {
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| {
            let inner = entry.strip_prefix('[')?.split(']').next()?;
            inner.parse().ok()
        })
        .or_else(|| entry.rsplit_once(':')?.0.parse().ok())?;
    Some(canonical_ip(ip))
}

// ------------------------------------------------------------ client_key

/// The namespace and store prefix the client-key target uses.
const KEY_NAMESPACE: &[u8] = b"limit\0fuzz";
const STORE_PREFIX: &str = "tg";

/// `client_key`: line 1 the client address (else `192.0.2.1`), line 2
/// `ipv6_prefix on_missing_key` (else `64 client_ip`), line 3 the key
/// sources, comma-separated, as in the config (else `client_ip`), line 4
/// the route name (else `api`), line 5 the query string (none if empty),
/// every further line a header `name: value` (spaces and tabs around the
/// value dropped, as HTTP parsers do). The three ways of building a key
/// agree, the display form reads back to the same store key (the admin
/// API takes every key a request can have), holds no control bytes and
/// one `|` between components, and the Redis keys hold only the prefix
/// and hex: never a byte the client sent (docs/configuration/limits.md).
pub fn client_key(data: &[u8]) {
    let mut lines = Lines::new(data);
    let client = ip_of(lines.bytes()).unwrap_or(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    let settings = lines.text();
    let mut settings = settings.split_whitespace();
    let ipv6_prefix = settings
        .next()
        .and_then(|p| p.parse::<u8>().ok())
        .filter(|p| *p <= 128)
        .unwrap_or(64);
    let on_missing = match settings.next() {
        Some("skip") => OnMissingKey::Skip,
        Some("deny") => OnMissingKey::Deny,
        _ => OnMissingKey::ClientIp,
    };
    let mut sources: Vec<KeySource> = lines
        .text()
        .split(',')
        .filter_map(|s| s.parse().ok())
        .take(8)
        .collect();
    if sources.is_empty() {
        // The config refuses an empty key.
        sources.push(KeySource::ClientIp);
    }
    // A route has a name (the config insists).
    let route = lines.text();
    let route: &str = if route.is_empty() { "api" } else { &route };
    let query = lines.text();
    let query = (!query.is_empty()).then_some(&*query);
    let mut headers = HeaderMap::new();
    for line in lines.0 {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        // As an HTTP parser hands it over: whitespace around the value gone.
        let (name, value) = (&line[..colon], trim_sp_htab(&line[colon + 1..]));
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let view = RequestView {
        client,
        headers: &headers,
        query,
        route,
        ipv6_prefix,
        identity: None,
    };

    let full = key::client_key(KEY_NAMESPACE, &sources, on_missing, &view);
    let fast = KeyPrefix::new(KEY_NAMESPACE).store_key(&sources, on_missing, &view);
    let display = key::display_key(&sources, on_missing, &view);
    match full {
        KeyOutcome::Key(k) => {
            assert_eq!(fast, KeyOutcome::Key(k.store));
            assert_eq!(display.as_deref(), Some(k.display.as_str()));
            let domain = KeyDomain {
                on_missing,
                routes: &[route],
            };
            assert_eq!(
                key::store_key_of_display(KEY_NAMESPACE, &sources, &domain, &k.display),
                Ok(k.store),
                "display {:?} reads back to the same key",
                k.display
            );
            assert!(!k.display.chars().any(char::is_control), "{:?}", k.display);
            assert_eq!(k.display.matches('|').count(), sources.len() - 1);
            let hex = tollgate_limit::key::hex(&k.store);
            assert!(hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            let (state, lock) = redis::keys(STORE_PREFIX, &k.store);
            assert_eq!(state, format!("{STORE_PREFIX}:{{{hex}}}:s"));
            assert_eq!(lock, format!("{STORE_PREFIX}:{{{hex}}}:l"));
            assert_eq!(
                redis::label_key(STORE_PREFIX, &k.store),
                format!("{STORE_PREFIX}:{{{hex}}}:n")
            );
        }
        KeyOutcome::Skip => {
            assert_eq!(on_missing, OnMissingKey::Skip);
            assert_eq!(fast, KeyOutcome::Skip);
            assert_eq!(display, None);
        }
        KeyOutcome::Deny => {
            assert_eq!(on_missing, OnMissingKey::Deny);
            assert_eq!(fast, KeyOutcome::Deny);
            assert_eq!(display, None);
        }
    }
}

/// `bytes` without spaces and tabs at either end.
fn trim_sp_htab(bytes: &[u8]) -> &[u8] {
    let sp = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !sp(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !sp(b)).map_or(start, |e| e + 1);
    &bytes[start..end]
}

// ----------------------------------------------------- ratelimit_headers

/// `ratelimit_headers`: line 1 the header style (`standard`, `draft10`,
/// `legacy`, `both`, `none`; else `both`), every further line one limit,
/// tab-separated: `name limit window_us remaining reset_us concurrency
/// grows_us` (numbers default to 0, `concurrency` is any non-empty text).
/// The standard fields are RFC 9651 Lists (checked here by a strict parser
/// of the subset they use) with one item per limit, in order, carrying
/// exactly that limit's figures (`w >= 1`; draft 11's `t` from `grows_us`,
/// `t >= 1`; draft 10's from `reset_us`, `t <= w`); the legacy fields are the most
/// restrictive limit's; the style's fields replace the upstream's, the
/// others are left alone. Returns the two standard field values written,
/// for a second, independent RFC 9651 parser to check.
pub fn ratelimit_headers(data: &[u8]) -> Vec<HeaderValue> {
    let (style, limits) = ratelimit_input(data);
    let all = [
        RATELIMIT_POLICY,
        RATELIMIT,
        X_RATELIMIT_LIMIT,
        X_RATELIMIT_REMAINING,
        X_RATELIMIT_RESET,
    ];
    let mut headers = HeaderMap::new();
    for name in &all {
        // What an upstream sent: the gateway's answer replaces it.
        headers.append(name.clone(), HeaderValue::from_static("upstream"));
        headers.append(name.clone(), HeaderValue::from_static("upstream, 2"));
    }
    add_headers(&mut headers, style, &limits, &[]);

    let draft = style.standard().filter(|_| !limits.is_empty());
    let standard = draft.is_some();
    let legacy = !limits.is_empty() && matches!(style, HeaderStyle::Legacy | HeaderStyle::Both);
    for (i, name) in all.iter().enumerate() {
        let written = if i < 2 { standard } else { legacy };
        let count = headers.get_all(name).iter().count();
        assert_eq!(count, if written { 1 } else { 2 }, "{name} lines");
    }
    let mut fields = Vec::new();
    if let Some(draft) = draft {
        fields.extend(check_standard_fields(&headers, &limits, draft));
    }
    if legacy {
        check_legacy_fields(&headers, &limits);
    }
    fields
}

/// The largest RFC 9651 Integer.
const SF_MAX: u64 = 999_999_999_999_999;

/// `w` as the fields show it: whole seconds, rounded up, at least 1.
fn shown_window(o: &Outcome) -> u64 {
    o.window
        .div_ceil(tollgate_limit::algorithm::SECOND)
        .clamp(1, SF_MAX)
}

/// Draft 10's `t` (and `X-RateLimit-Reset`) as the fields show it: whole
/// seconds, rounded up, at most `w`.
fn shown_reset(o: &Outcome) -> u64 {
    o.reset
        .div_ceil(tollgate_limit::algorithm::SECOND)
        .min(shown_window(o))
}

/// `t` as `draft`'s fields show it: draft 11's whole seconds rounded up, at
/// least 1; draft 10's [`shown_reset`].
fn shown_t(o: &Outcome, draft: Draft) -> u64 {
    match draft {
        Draft::Eleven => o
            .grows_after
            .div_ceil(tollgate_limit::algorithm::SECOND)
            .max(1),
        Draft::Ten => shown_reset(o),
    }
}

/// [`ratelimit_headers`]'s input: the style (line 1) and one limit per
/// further line (16 at most).
fn ratelimit_input(data: &[u8]) -> (HeaderStyle, Vec<Figure>) {
    let mut lines = Lines::new(data);
    let style = match lines.text().trim() {
        "standard" => HeaderStyle::Standard,
        "draft10" => HeaderStyle::Draft10,
        "legacy" => HeaderStyle::Legacy,
        "none" => HeaderStyle::None,
        _ => HeaderStyle::Both,
    };
    let mut limits = Vec::new();
    for line in lines.0.take(16) {
        let line = String::from_utf8_lossy(line);
        let mut f = line.split('\t');
        let name = f.next().unwrap_or_default().to_owned();
        let fields: Vec<&str> = f.collect();
        let num = |i: usize| {
            fields
                .get(i)
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let outcome = Outcome {
            status: Status::Allowed,
            lock_started: false,
            delay: 0,
            limit: num(0),
            window: num(1),
            remaining: num(2),
            reset: num(3),
            grows_after: num(5),
            retry_after: 0,
            at: 0,
            taken: 0,
        };
        let concurrency = fields.get(4).is_some_and(|c| !c.trim().is_empty());
        limits.push(Figure {
            name: name.as_str().into(),
            outcome,
            concurrency,
            key: [0; 16],
            local: false,
        });
    }
    (style, limits)
}

/// `RateLimit-Policy` and `RateLimit` are RFC 9651 Lists with one item per
/// limit, in order, carrying exactly its figures; returns the two values.
fn check_standard_fields(headers: &HeaderMap, limits: &[Figure], draft: Draft) -> [HeaderValue; 2] {
    let policy = headers.get(RATELIMIT_POLICY).expect("written");
    let state = headers.get(RATELIMIT).expect("written");
    let policy_items = parse_sf_list(policy.as_bytes())
        .unwrap_or_else(|| panic!("RateLimit-Policy {policy:?} is an RFC 9651 List"));
    let state_items = parse_sf_list(state.as_bytes())
        .unwrap_or_else(|| panic!("RateLimit {state:?} is an RFC 9651 List"));
    assert_eq!(policy_items.len(), limits.len());
    assert_eq!(state_items.len(), limits.len());
    for ((l, p), s) in limits.iter().zip(&policy_items).zip(&state_items) {
        let o = &l.outcome;
        let name: String = l
            .name
            .chars()
            .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
            .collect();
        let mut want_policy = vec![
            ("q".to_owned(), SfValue::Int(o.limit.min(SF_MAX))),
            ("w".to_owned(), SfValue::Int(shown_window(o))),
        ];
        if l.concurrency {
            want_policy.push((
                "qu".to_owned(),
                SfValue::Str("concurrent-requests".to_owned()),
            ));
        }
        assert_eq!(*p, (name.clone(), want_policy));
        let want_state = vec![
            ("r".to_owned(), SfValue::Int(o.remaining.min(SF_MAX))),
            ("t".to_owned(), SfValue::Int(shown_t(o, draft))),
        ];
        assert_eq!(*s, (name, want_state));
        match draft {
            Draft::Eleven => assert!(shown_t(o, draft) >= 1),
            Draft::Ten => assert!(shown_t(o, draft) <= shown_window(o)),
        }
    }
    [policy.clone(), state.clone()]
}

/// `X-RateLimit-*` are the most restrictive limit's: least remaining, then
/// longest reset, then the first.
fn check_legacy_fields(headers: &HeaderMap, limits: &[Figure]) {
    let mut most = &limits[0].outcome;
    for l in &limits[1..] {
        let o = &l.outcome;
        if o.remaining < most.remaining || (o.remaining == most.remaining && o.reset > most.reset) {
            most = o;
        }
    }
    let int = |name: &HeaderName| {
        let v = headers.get(name).expect("written").to_str().expect("ASCII");
        v.parse::<u64>().unwrap_or_else(|_| panic!("{name}: {v:?}"))
    };
    assert_eq!(int(&X_RATELIMIT_LIMIT), most.limit.min(SF_MAX));
    assert_eq!(int(&X_RATELIMIT_REMAINING), most.remaining.min(SF_MAX));
    assert_eq!(int(&X_RATELIMIT_RESET), shown_reset(most));
}

/// A parameter value of the RFC 9651 subset the rate-limit fields use.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SfValue {
    /// An sf-integer.
    Int(u64),
    /// An sf-string.
    Str(String),
}

/// One list member: a String item and its parameters.
type SfItem = (String, Vec<(String, SfValue)>);

/// A strict RFC 9651 §4.2.1 parser for Lists whose members are String
/// items with Integer or String parameters; `None` for anything else.
fn parse_sf_list(input: &[u8]) -> Option<Vec<SfItem>> {
    let mut p = SfParser { s: input, i: 0 };
    let mut items = Vec::new();
    if p.s.is_empty() {
        return Some(items);
    }
    loop {
        let name = p.string()?;
        let mut params = Vec::new();
        while p.eat(b';') {
            while p.eat(b' ') {}
            let key = p.key()?;
            let value = if p.eat(b'=') {
                if p.peek() == Some(b'"') {
                    SfValue::Str(p.string()?)
                } else {
                    SfValue::Int(p.integer()?)
                }
            } else {
                // A bare key is Boolean true: not what these fields use.
                return None;
            };
            params.push((key, value));
        }
        items.push((name, params));
        while p.eat(b' ') || p.eat(b'\t') {}
        if p.i == p.s.len() {
            return Some(items);
        }
        if !p.eat(b',') {
            return None;
        }
        while p.eat(b' ') || p.eat(b'\t') {}
        if p.i == p.s.len() {
            // A trailing comma.
            return None;
        }
    }
}

struct SfParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl SfParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.i += usize::from(hit);
        hit
    }

    fn string(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return None;
        }
        let mut out = String::new();
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => return Some(out),
                b'\\' => {
                    let e = self.peek().filter(|e| matches!(e, b'"' | b'\\'))?;
                    self.i += 1;
                    out.push(char::from(e));
                }
                b' '..=b'~' => out.push(char::from(c)),
                _ => return None,
            }
        }
    }

    fn key(&mut self) -> Option<String> {
        let start = self.i;
        if !matches!(self.peek()?, b'a'..=b'z' | b'*') {
            return None;
        }
        while self
            .peek()
            .is_some_and(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'))
        {
            self.i += 1;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A non-negative sf-integer (at most 15 digits).
    fn integer(&mut self) -> Option<u64> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        if digits.is_empty() || digits.len() > 15 {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }
}

// ------------------------------------------------------------ h1_framing

/// The largest head the framing target lets the watcher follow.
const BIG_HEAD: usize = 1 << 20;

/// `h1_framing`: line 1 lists read sizes (numbers, cycled; else reads of
/// one byte), the rest is the byte stream a client sends. The HTTP/1
/// framing watcher never panics, and where it first sees an ambiguous head
/// (Content-Length and Transfer-Encoding) does not depend on how the stream
/// is cut into reads; the first head, if complete, is ambiguous to the
/// watcher exactly when it has both fields, and then admission's framing
/// check refuses it and closes the connection; a request-target admission
/// normalises is a canonical path.
pub fn h1_framing(data: &[u8]) {
    let (control, stream) = match data.iter().position(|b| *b == b'\n') {
        Some(nl) => (&data[..nl], &data[nl + 1..]),
        None => (&[][..], data),
    };
    let mut reads: Vec<usize> = control
        .split(|b| !b.is_ascii_digit())
        .filter_map(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .filter(|n| *n > 0)
        .take(16)
        .collect();
    if reads.is_empty() {
        reads.push(1);
    }
    let whole = watch(stream, &[usize::MAX], BIG_HEAD);
    let split = watch(stream, &reads, BIG_HEAD);
    assert_eq!(
        whole.first_ambiguous, split.first_ambiguous,
        "the first ambiguous head, whole vs read in pieces of {reads:?}"
    );
    // A small head limit: the watch may stop early, never panic.
    let small = watch(stream, &reads, 64);
    assert!(small.first_ambiguous.is_none() || small.first_ambiguous == whole.first_ambiguous);

    first_head(stream, whole.first_ambiguous == Some(1));
}

/// What [`watch`] saw.
struct Watched {
    first_ambiguous: Option<u64>,
}

/// Feeds `stream` through [`SniffIo`] in reads of the `reads` sizes.
fn watch(stream: &[u8], reads: &[usize], max_head: usize) -> Watched {
    let framing = Arc::new(Framing::new(Instant::now()));
    let mut io = SniffIo::new(
        Reads {
            rest: stream,
            sizes: reads,
            n: 0,
        },
        max_head,
        crate::server::sniff::MAX_CHUNK,
        framing.clone(),
    );
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = [0u8; 16 * 1024];
    loop {
        let mut read = ReadBuf::new(&mut buf);
        match Pin::new(&mut io).poll_read(&mut cx, &mut read) {
            Poll::Ready(Ok(())) if !read.filled().is_empty() => {}
            _ => break,
        }
    }
    // Every head is at least a few bytes, so there are fewer than this.
    let bound = stream.len() as u64 / 4 + 1;
    let first_ambiguous = (1..=bound).find(|n| framing.ambiguous(*n));
    if let Some(n) = first_ambiguous {
        assert!(((n + 1)..=bound).all(|m| !framing.ambiguous(m)));
    }
    assert!(!framing.ambiguous(0));
    Watched { first_ambiguous }
}

/// An in-memory client whose reads come in the given sizes.
struct Reads<'a> {
    rest: &'a [u8],
    sizes: &'a [usize],
    n: usize,
}

impl AsyncRead for Reads<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let size = self.sizes[self.n % self.sizes.len()];
        let take = size.min(self.rest.len()).min(buf.remaining());
        let (now, rest) = self.rest.split_at(take);
        buf.put_slice(now);
        self.rest = rest;
        self.n += 1;
        Poll::Ready(Ok(()))
    }
}

/// The first head of `stream` against admission's own checks.
fn first_head(stream: &[u8], watcher_says_ambiguous: bool) {
    let start = stream
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(stream.len());
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut head = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = head.parse(&stream[start..]) else {
        return;
    };
    let named = |h: &httparse::Header<'_>, n: &str| h.name.eq_ignore_ascii_case(n);
    let has_cl = head.headers.iter().any(|h| named(h, "content-length"));
    let has_te = head.headers.iter().any(|h| named(h, "transfer-encoding"));
    assert_eq!(watcher_says_ambiguous, has_cl && has_te, "first head");

    let mut headers = HeaderMap::new();
    for h in head.headers.iter() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) {
            headers.append(n, v);
        }
    }
    let te = headers.get_all(TRANSFER_ENCODING).iter().count();
    match admission::framing(&headers) {
        Ok(()) => {
            assert!(te == 0 || (te == 1 && !headers.contains_key(CONTENT_LENGTH)));
            if let Some(v) = headers.get(TRANSFER_ENCODING) {
                assert!(v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
        }
        Err(err) => {
            assert!(te > 0, "only Transfer-Encoding is refused: {err:?}");
            if headers.contains_key(CONTENT_LENGTH) {
                assert!(
                    matches!(
                        err,
                        crate::error::GatewayError::BadRequest { close: true, .. }
                    ),
                    "both fields: 400 and close, got {err:?}"
                );
            }
        }
    }
    if let Some(n) = admission::content_length(&headers) {
        let v = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok());
        assert_eq!(v.map(|v| v.trim().parse::<u64>().ok()), Some(Some(n)));
    }

    let (Some(method), Some(target)) = (head.method, head.path) else {
        return;
    };
    let Ok(mut req) = http::Request::builder().method(method).uri(target).body(()) else {
        return;
    };
    *req.headers_mut() = headers;
    if let Ok(Some(host)) = admission::request_host(&req) {
        let host = host.as_bytes();
        assert!(!host.is_empty() && !host.contains(&b'@'));
        assert!(http::uri::Authority::try_from(host).is_ok());
    }
    for mode in [
        EscapedSlashes::Reject,
        EscapedSlashes::Decode,
        EscapedSlashes::Keep,
    ] {
        if let Ok(p) = admission::target_path(&req, mode) {
            check_canonical_path(&p, mode);
        }
    }
}
