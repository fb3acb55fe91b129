//! W3C Trace Context (level 1): reading `traceparent` and `tracestate` from
//! a request, and writing the ones the gateway sends upstream.
//!
//! The gateway is a hop of the trace: it continues an incoming trace (its
//! trace id and sampled flag) with a span id of its own, and starts a new
//! trace when the request carries none or one it cannot read. A
//! `traceparent` that is not valid (wrong length, upper-case or non-hex
//! digits, version `ff`, an all-zero id, several fields) is never
//! forwarded as sent: it is replaced by a new trace, and its `tracestate`
//! is dropped with it (the specification's "restart the trace"). A
//! `tracestate` that does not parse is dropped alone.
//!
//! Trace ids are not identity: the gateway continues them from any peer,
//! trusted or not, as the specification asks; nothing keys on them.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// `traceparent`.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// `tracestate`.
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The length of a version-00 `traceparent`: `vv-` 32 hex `-` 16 hex `-ff`.
const TRACEPARENT_LEN: usize = 55;

/// At most this many list members in a `tracestate` (the specification's
/// limit); a longer one is dropped.
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The sampled bit of the trace flags, the only flag level 1 defines.
const SAMPLED: u8 = 0x01;

/// A trace id: 16 bytes, never all zero, kept as the 32 lower-case hex
/// digits it is written as (in every `traceparent` the gateway sends and in
/// the access log), so that it is encoded once at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 32]);

/// A span id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// A random trace id (128 random bits, drawn again in the one case in
    /// 2^128 they are all zero).
    pub fn random() -> TraceId {
        loop {
            let id = fastrand::u128(..);
            if id != 0 {
                let mut text = [0u8; 32];
                hex_into(&id.to_be_bytes(), &mut text);
                return TraceId(text);
            }
        }
    }

    /// The trace id these 32 lower-case hex digits write (a `traceparent`'s
    /// trace-id field), unless they are not that or all zeros.
    pub fn from_hex(digits: &[u8]) -> Option<TraceId> {
        let bytes = lower_hex::<16>(digits)?;
        let text: [u8; 32] = digits.try_into().ok()?;
        (bytes != [0; 16]).then_some(TraceId(text))
    }

    /// The id's 16 bytes (its digits are known lower-case hex: decoded
    /// without checking them again).
    pub fn bytes(&self) -> [u8; 16] {
        let nibble = |d: u8| if d >= b'a' { d - b'a' + 10 } else { d - b'0' };
        let mut out = [0u8; 16];
        for (b, pair) in out.iter_mut().zip(self.0.chunks_exact(2)) {
            *b = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        out
    }

    /// The id's 32 lower-case hex digits, as bytes.
    pub fn digits(&self) -> &[u8; 32] {
        &self.0
    }

    /// The id's 32 lower-case hex digits.
    pub fn as_str(&self) -> &str {
        // Only hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// 32 lower-case hex digits (the access log's `trace_id`).
impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Each byte's two lower-case hex digits.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        pairs[b] = [DIGITS[b >> 4], DIGITS[b & 15]];
        b += 1;
    }
    pairs
};

/// `bytes` as lower-case hex digits into `out` (twice as long): one table
/// read per byte, on every request's `traceparent`.
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(*b)]);
    }
}

impl SpanId {
    /// A random span id (never all zero).
    pub fn random() -> SpanId {
        loop {
            let id = fastrand::u64(..);
            if id != 0 {
                return SpanId(id.to_be_bytes());
            }
        }
    }
}

/// The trace a request belongs to, as the gateway continues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace: the client's, or a new one.
    pub trace_id: TraceId,
    /// The caller's span (the client's `parent-id`), when the trace was
    /// continued; `None` for a trace the gateway started.
    pub parent: Option<SpanId>,
    /// Whether the trace is sampled (the `sampled` flag; for a new trace,
    /// the gateway's own decision).
    pub sampled: bool,
    /// The `tracestate` to pass on, when the client sent a valid one with
    /// a valid `traceparent`.
    pub state: Option<HeaderValue>,
    /// Whether the request carried a `tracestate` at all (one that is not
    /// passed on is removed before the request goes upstream).
    pub state_sent: bool,
}

impl TraceContext {
    /// The trace of a request with these headers: the incoming one when its
    /// `traceparent` is valid, else a new trace with a random id, whose
    /// sampled flag `sample_new` decides (called only then).
    pub fn of(headers: &HeaderMap, sample_new: impl FnOnce() -> bool) -> TraceContext {
        TraceContext::of_or_new(headers, TraceId::random, sample_new)
    }

    /// [`TraceContext::of`], a new trace taking the id `new_id` gives
    /// (called only then).
    pub fn of_or_new(
        headers: &HeaderMap,
        new_id: impl FnOnce() -> TraceId,
        sample_new: impl FnOnce() -> bool,
    ) -> TraceContext {
        // One pass over the field names first: most requests carry neither
        // field, and then neither is looked up (each lookup hashes its
        // name), nor removed later.
        let (mut parent_sent, mut state_sent) = (false, false);
        for name in headers.keys() {
            match name.as_str() {
                "traceparent" => parent_sent = true,
                "tracestate" => state_sent = true,
                _ => {}
            }
        }
        match parent_sent.then(|| read_traceparent(headers)).flatten() {
            Some((trace_id, parent, flags)) => TraceContext {
                trace_id,
                parent: Some(parent),
                sampled: flags & SAMPLED != 0,
                state: state_sent.then(|| read_tracestate(headers)).flatten(),
                state_sent,
            },
            None => TraceContext {
                trace_id: new_id(),
                parent: None,
                sampled: sample_new(),
                state: None,
                state_sent,
            },
        }
    }

    /// The `traceparent` naming `span` (the gateway's span for this hop) as
    /// the parent: version 00, this trace, the sampled flag alone (level 1
    /// defines no other).
    pub fn traceparent(&self, span: SpanId) -> HeaderValue {
        let mut out = [0u8; TRACEPARENT_LEN];
        out[..3].copy_from_slice(b"00-");
        // Fixed sizes: 16 bytes fill 32 digits, 8 fill 16, 1 fills 2.
        out[3..35].copy_from_slice(&self.trace_id.0);
        out[35] = b'-';
        hex_into(&span.0, &mut out[36..52]);
        out[52..55].copy_from_slice(if self.sampled { b"-01" } else { b"-00" });
        HeaderValue::from_bytes(&out).expect("hex digits and dashes are a valid header value")
    }

    /// Replaces the request's `traceparent` and `tracestate` with the ones
    /// this hop sends: the trace continued with `span` as the parent, and
    /// the incoming `tracestate` when it was kept.
    pub fn set_headers(&self, headers: &mut HeaderMap, span: SpanId) {
        headers.insert(TRACEPARENT.clone(), self.traceparent(span));
        match &self.state {
            Some(state) => {
                headers.insert(TRACESTATE.clone(), state.clone());
            }
            None if self.state_sent => {
                headers.remove(&TRACESTATE);
            }
            None => {}
        }
    }
}

/// The incoming `traceparent`'s trace id, parent id and flags, if there is
/// exactly one field and it is valid (W3C Trace Context level 1, §3.2 and
/// "Versioning of traceparent").
fn read_traceparent(headers: &HeaderMap) -> Option<(TraceId, SpanId, u8)> {
    let mut fields = headers.get_all(&TRACEPARENT).iter();
    let (Some(value), None) = (fields.next(), fields.next()) else {
        return None;
    };
    parse_traceparent(value.as_bytes())
}

/// A `traceparent` value's trace id, parent id and flags, if it is valid.
///
/// Version 00 is exactly 55 characters. A later version (not `ff`) is read
/// as far as version 00's fields go, as the specification asks of a
/// version it does not know: at least 55 characters, and a `-` after the
/// flags if there is more.
pub fn parse_traceparent(v: &[u8]) -> Option<(TraceId, SpanId, u8)> {
    if v.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = lower_hex::<1>(&v[0..2])?[0];
    if version == 0xff {
        return None;
    }
    if version == 0 && v.len() != TRACEPARENT_LEN {
        return None;
    }
    if v.len() > TRACEPARENT_LEN && v[TRACEPARENT_LEN] != b'-' {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let trace = TraceId::from_hex(&v[3..35])?;
    let parent = lower_hex::<8>(&v[36..52])?;
    let flags = lower_hex::<1>(&v[53..55])?[0];
    if parent == [0; 8] {
        return None;
    }
    Some((trace, SpanId(parent), flags))
}

/// `N` bytes from `2 * N` lower-case hex digits (upper case is not valid
/// in a `traceparent`).
fn lower_hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N
        || !digits
            .iter()
            .all(|&d| matches!(d, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

/// The incoming `tracestate`, its fields joined with `,`, if every list
/// member is valid, there are at most 32 and no key repeats (empty members
/// are allowed and dropped).
fn read_tracestate(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut members: Vec<&[u8]> = Vec::new();
    for field in headers.get_all(&TRACESTATE) {
        for member in field.as_bytes().split(|&b| b == b',') {
            let member = member.trim_ascii();
            if member.is_empty() {
                continue;
            }
            let key = tracestate_member(member)?;
            if members.len() == MAX_TRACESTATE_MEMBERS
                || members
                    .iter()
                    .any(|m| m.split(|&b| b == b'=').next() == Some(key))
            {
                return None;
            }
            members.push(member);
        }
    }
    if members.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&members.join(&b","[..])).ok()
}

/// A `tracestate` list member's key, if the member is `key=value` with a
/// valid key (a simple key, or `tenant@system`) and value.
fn tracestate_member(member: &[u8]) -> Option<&[u8]> {
    let eq = member.iter().position(|&b| b == b'=')?;
    let (key, value) = (&member[..eq], &member[eq + 1..]);
    (tracestate_key(key) && tracestate_value(value)).then_some(key)
}

/// `simple-key = lcalpha 0*255( lcalpha / DIGIT / "_" / "-"/ "*" / "/" )`,
/// or `tenant-id "@" system-id`: the tenant 1 to 241 of those characters
/// beginning with a letter or digit, the system 1 to 14 beginning with a
/// letter.
fn tracestate_key(key: &[u8]) -> bool {
    let rest = |s: &[u8]| {
        s.iter()
            .all(|&b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    match key.iter().position(|&b| b == b'@') {
        None => (1..=256).contains(&key.len()) && key[0].is_ascii_lowercase() && rest(&key[1..]),
        Some(at) => {
            let (tenant, system) = (&key[..at], &key[at + 1..]);
            (1..=241).contains(&tenant.len())
                && matches!(tenant[0], b'a'..=b'z' | b'0'..=b'9')
                && rest(&tenant[1..])
                && (1..=14).contains(&system.len())
                && system[0].is_ascii_lowercase()
                && rest(&system[1..])
        }
    }
}

/// `value = 0*255(chr) nblk-chr`: 1 to 256 printable ASCII characters
/// but `,` and `=`, spaces allowed inside but not at the end.
fn tracestate_value(value: &[u8]) -> bool {
    (1..=256).contains(&value.len())
        && value
            .iter()
            .all(|&b| b == b' ' || (0x21..=0x7e).contains(&b) && b != b',' && b != b'=')
        && value.last() != Some(&b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in fields {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_a_new_span() {
        let ctx = TraceContext::of(&headers(&[("traceparent", VALID)]), || {
            panic!("a continued trace is not sampled again")
        });
        assert_eq!(ctx.trace_id.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.parent, Some(SpanId(hex_bytes("00f067aa0ba902b7"))));
        assert!(ctx.sampled);
        let span = SpanId([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            ctx.traceparent(span),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"
        );
    }

    fn hex_bytes<const N: usize>(s: &str) -> [u8; N] {
        let mut out = [0; N];
        hex::decode_to_slice(s, &mut out).unwrap();
        out
    }

    #[test]
    fn malformed_traceparents_start_a_new_trace() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", // short
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // 00 is 55 exactly
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", // bad flags
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", // one-digit flags
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // separator
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", // later version, no dash
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // (trimmed by nobody)
        ];
        for value in bad {
            assert_eq!(parse_traceparent(value.as_bytes()), None, "{value:?}");
            let ctx = TraceContext::of(
                &headers(&[("traceparent", value), ("tracestate", "a=b")]),
                || true,
            );
            assert_eq!(ctx.parent, None, "{value:?}");
            assert_ne!(ctx.trace_id.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(ctx.state, None, "a tracestate goes with its traceparent");
            assert!(ctx.sampled, "a new trace is sampled as the gateway decides");
        }
    }

    #[test]
    fn a_later_version_is_read_as_far_as_version_00_goes() {
        let v = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next";
        let (trace, parent, flags) = parse_traceparent(v.as_bytes()).unwrap();
        assert_eq!(trace.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent, SpanId(hex_bytes("00f067aa0ba902b7")));
        assert_eq!(flags, 9);
        // Sent on as version 00 with the sampled flag alone.
        let ctx = TraceContext::of(&headers(&[("traceparent", v)]), || false);
        assert!(ctx
            .traceparent(SpanId([9; 8]))
            .to_str()
            .unwrap()
            .ends_with("-01"));
    }

    #[test]
    fn several_traceparent_fields_are_not_one() {
        let ctx = TraceContext::of(
            &headers(&[("traceparent", VALID), ("traceparent", VALID)]),
            || false,
        );
        assert_eq!(ctx.parent, None);
        assert!(!ctx.sampled);
    }

    #[test]
    fn tracestate_is_kept_joined_or_dropped_whole() {
        let with = |states: &[&str]| {
            let mut fields = vec![("traceparent", VALID)];
            fields.extend(states.iter().map(|s| ("tracestate", *s)));
            TraceContext::of(&headers(&fields), || false).state
        };
        assert_eq!(
            with(&["rojo=00f067aa0ba902b7", " congo=t61rcWkgMzE ,"]).unwrap(),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
        );
        assert_eq!(with(&["acme@tenant1=x y"]).unwrap(), "acme@tenant1=x y");
        assert_eq!(with(&[]), None);
        for bad in [
            "Rojo=1",
            "rojo",
            "rojo=",
            "rojo=a,rojo=b",
            "rojo=a=b",
            "a=b\tc",
            "@x=1",
        ] {
            assert_eq!(with(&[bad]), None, "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(with(&[&many.join(",")]), None, "over 32 members");
        assert!(with(&[&many[..32].join(",")]).is_some());
    }

    #[test]
    fn set_headers_replaces_what_the_client_sent() {
        let mut h = headers(&[("traceparent", VALID), ("tracestate", "Bad=1")]);
        let ctx = TraceContext::of(&h, || false);
        ctx.set_headers(&mut h, SpanId([0xab; 8]));
        assert_eq!(
            h.get(&TRACEPARENT).unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-abababababababab-01"
        );
        assert_eq!(h.get(&TRACESTATE), None);
        assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
    }

    #[test]
    fn new_ids_are_never_zero_and_differ() {
        assert_ne!(TraceId::random(), TraceId::random());
        assert_ne!(SpanId::random().0, [0; 8]);
    }
}
