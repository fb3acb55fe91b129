//! Rate-limit response fields and the rejection (SPEC §5.4).
//!
//! `standard` is draft-ietf-httpapi-ratelimit-headers-10: two RFC 9651
//! structured-field Lists, one item per limit, named by the limit's name:
//!
//! ```text
//! RateLimit-Policy: "per_client";q=20;w=2, "login";q=5;w=60
//! RateLimit: "per_client";r=17;t=1, "login";r=4;t=42
//! ```
//!
//! `w` and `t` are whole seconds rounded up, `w >= 1`, `t <= w`; a
//! `concurrency` limit adds `qu="concurrent-requests"`. `legacy` is
//! `X-RateLimit-Limit` / `-Remaining` / `-Reset` for the most restrictive
//! limit. The gateway's fields replace any of the same name from the
//! upstream, so a client never sees two answers for one quota.

use std::cmp::Reverse;

use bytes::Bytes;
use http::header::{HeaderName, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};

use super::{Micros, Outcome};
use crate::algorithm::SECOND;
use crate::config::HeaderStyle;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// The largest RFC 9651 Integer.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// One limit's figures for the response fields.
#[derive(Debug, Clone, Copy)]
pub struct LimitFigures<'a> {
    /// The limit's name (the item's value).
    pub name: &'a str,
    /// What the limit answered for this request.
    pub outcome: &'a Outcome,
    /// A `concurrency` limit: its quota is requests in flight.
    pub concurrency: bool,
}

impl LimitFigures<'_> {
    /// `q`.
    fn quota(&self) -> u64 {
        self.outcome.limit.min(SF_INTEGER_MAX)
    }

    /// `w`: whole seconds, rounded up, at least 1.
    fn window(&self) -> u64 {
        secs_ceil(self.outcome.window).clamp(1, SF_INTEGER_MAX)
    }

    /// `r`.
    fn remaining(&self) -> u64 {
        self.outcome.remaining.min(SF_INTEGER_MAX)
    }

    /// `t`: whole seconds, rounded up, never more than `w`.
    fn reset(&self) -> u64 {
        secs_ceil(self.outcome.reset).min(self.window())
    }
}

/// Whole seconds, rounded up.
pub fn secs_ceil(us: Micros) -> u64 {
    us.div_ceil(SECOND)
}

/// Add `RateLimit-Policy` and `RateLimit` (standard), `X-RateLimit-*`
/// (legacy, for the most restrictive limit: the one with the least
/// `remaining`, ties to the longest reset), both, or none. No limits, no
/// fields. Fields of these names already in `headers` are replaced.
pub fn add_headers(headers: &mut HeaderMap, style: HeaderStyle, limits: &[LimitFigures<'_>]) {
    if limits.is_empty() {
        return;
    }
    if matches!(style, HeaderStyle::Standard | HeaderStyle::Both) {
        add_standard(headers, limits);
    }
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        add_legacy(headers, limits);
    }
}

fn add_standard(headers: &mut HeaderMap, limits: &[LimitFigures<'_>]) {
    // Both fields in one buffer, split once it is a `Bytes`: one allocation
    // for the text and one for the handle both values share.
    let names: usize = limits.iter().map(|l| l.name.len() + 4).sum();
    let mut buf = Vec::with_capacity(2 * names + limits.len() * 96);
    for (i, l) in limits.iter().enumerate() {
        push_item(
            &mut buf,
            i,
            l.name,
            [(b";q=", l.quota()), (b";w=", l.window())],
        );
        if l.concurrency {
            buf.extend_from_slice(b";qu=\"concurrent-requests\"");
        }
    }
    let policy_len = buf.len();
    for (i, l) in limits.iter().enumerate() {
        push_item(
            &mut buf,
            i,
            l.name,
            [(b";r=", l.remaining()), (b";t=", l.reset())],
        );
    }
    let mut state = Bytes::from(buf);
    let policy = state.split_to(policy_len);
    insert_bytes(headers, RATELIMIT_POLICY, policy);
    insert_bytes(headers, RATELIMIT, state);
}

/// The `index`th item of a list: `, ` unless it is the first, the name as
/// an sf-string, then each `;key=` and its integer.
// Always inlined: called, it made add_headers ~450 instructions dearer per
// request with 3 limits (callgrind), more than the two loops it serves.
#[inline(always)]
fn push_item(buf: &mut Vec<u8>, index: usize, name: &str, params: [(&[u8], u64); 2]) {
    if index > 0 {
        buf.extend_from_slice(b", ");
    }
    push_sf_string(buf, name);
    for (key, value) in params {
        buf.extend_from_slice(key);
        push_u64(buf, value);
    }
}

fn add_legacy(headers: &mut HeaderMap, limits: &[LimitFigures<'_>]) {
    let Some(most) = limits
        .iter()
        .min_by_key(|l| (l.outcome.remaining, Reverse(l.outcome.reset)))
    else {
        return;
    };
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(most.quota()));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(most.remaining()));
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(most.reset()));
}

/// Makes `value` a header value without copying it.
fn insert_bytes(headers: &mut HeaderMap, name: HeaderName, value: Bytes) {
    // Only visible ASCII is ever written, so this cannot fail; if it did,
    // the field is left out rather than the request failing.
    if let Ok(v) = HeaderValue::from_maybe_shared(value) {
        headers.insert(name, v);
    }
}

/// An RFC 9651 String: `"` and `\` escaped; anything outside visible ASCII
/// (never in a validated limit name) becomes `?`.
fn push_sf_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    if s.bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        // Every validated limit name: nothing to escape.
        out.extend_from_slice(s.as_bytes());
    } else {
        for c in s.chars() {
            match c {
                '"' | '\\' => {
                    out.push(b'\\');
                    out.push(c as u8);
                }
                ' '..='~' => out.push(c as u8),
                _ => out.push(b'?'),
            }
        }
    }
    out.push(b'"');
}

/// `n` in decimal, without going through `core::fmt` (this runs for every
/// figure of every limited response).
fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Whether the request is gRPC: `content-type: application/grpc`, or
/// `application/grpc+proto`, `application/grpc-web...`, with parameters.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    headers.get(CONTENT_TYPE).is_some_and(|ct| {
        let ct = ct.as_bytes();
        ct.len() >= GRPC.len()
            && ct[..GRPC.len()].eq_ignore_ascii_case(GRPC)
            && matches!(ct.get(GRPC.len()), None | Some(b'+' | b'-' | b';' | b' '))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Status;
    use sfv::{BareItem, List, ListEntry, Parser};

    fn outcome(limit: u64, window: Micros, remaining: u64, reset: Micros) -> Outcome {
        Outcome {
            status: Status::Allowed,
            lock_started: false,
            delay: 0,
            limit,
            window,
            remaining,
            reset,
            retry_after: 0,
        }
    }

    fn parse(headers: &HeaderMap, name: &HeaderName) -> List {
        let v = headers.get(name).expect("field present");
        Parser::new(v.as_bytes()).parse().expect("a valid sf-list")
    }

    /// (name, [(param, integer or string)]) of every item.
    fn items(list: &List) -> Vec<(String, Vec<(String, String)>)> {
        list.iter()
            .map(|e| {
                let ListEntry::Item(item) = e else {
                    panic!("inner list")
                };
                let name = item.bare_item.as_string().expect("a string item");
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            BareItem::Integer(i) => i64::from(*i).to_string(),
                            BareItem::String(s) => format!("{:?}", s.as_str()),
                            other => panic!("unexpected {other:?}"),
                        };
                        (k.as_str().to_owned(), v)
                    })
                    .collect();
                (name.as_str().to_owned(), params)
            })
            .collect()
    }

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn standard_fields_as_in_the_spec() {
        let a = outcome(20, 2 * SECOND, 17, SECOND);
        let b = outcome(5, 60 * SECOND, 4, 42 * SECOND);
        let limits = [
            LimitFigures {
                name: "per_client",
                outcome: &a,
                concurrency: false,
            },
            LimitFigures {
                name: "login",
                outcome: &b,
                concurrency: false,
            },
        ];
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(
            h.get(RATELIMIT_POLICY).unwrap(),
            r#""per_client";q=20;w=2, "login";q=5;w=60"#
        );
        assert_eq!(
            h.get(RATELIMIT).unwrap(),
            r#""per_client";r=17;t=1, "login";r=4;t=42"#
        );
        assert_eq!(
            items(&parse(&h, &RATELIMIT_POLICY)),
            vec![
                ("per_client".into(), p(&[("q", "20"), ("w", "2")])),
                ("login".into(), p(&[("q", "5"), ("w", "60")])),
            ]
        );
        assert_eq!(
            items(&parse(&h, &RATELIMIT)),
            vec![
                ("per_client".into(), p(&[("r", "17"), ("t", "1")])),
                ("login".into(), p(&[("r", "4"), ("t", "42")])),
            ]
        );
        assert!(h.get(X_RATELIMIT_LIMIT).is_none());
    }

    #[test]
    fn concurrency_and_awkward_names() {
        let c = outcome(10, 300 * SECOND, 3, 0);
        let limits = [LimitFigures {
            name: "in\"fli\\ght",
            outcome: &c,
            concurrency: true,
        }];
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Both, &limits);
        assert_eq!(
            items(&parse(&h, &RATELIMIT_POLICY)),
            vec![(
                "in\"fli\\ght".into(),
                p(&[("q", "10"), ("w", "300"), ("qu", "\"concurrent-requests\"")])
            )]
        );
        assert_eq!(
            items(&parse(&h, &RATELIMIT)),
            vec![("in\"fli\\ght".into(), p(&[("r", "3"), ("t", "0")]))]
        );
        // A name outside visible ASCII still gives a valid field.
        let limits = [LimitFigures {
            name: "é\n",
            outcome: &c,
            concurrency: false,
        }];
        add_headers(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(items(&parse(&h, &RATELIMIT))[0].0, "??");
    }

    #[test]
    fn rounding_and_bounds() {
        for (window, reset, w, t) in [
            (1, 1, 1, 1),
            (0, 0, 1, 0),
            (SECOND, SECOND, 1, 1),
            (SECOND + 1, SECOND + 1, 2, 2),
            (1_500_000, 1_400_000, 2, 2),
            (60 * SECOND, 59 * SECOND + 1, 60, 60),
            // An inconsistent reset is capped at w.
            (10 * SECOND, 3600 * SECOND, 10, 10),
            (
                u64::MAX,
                u64::MAX,
                u64::MAX.div_ceil(SECOND),
                u64::MAX.div_ceil(SECOND),
            ),
        ] {
            let o = outcome(u64::MAX, window, u64::MAX, reset);
            let l = [LimitFigures {
                name: "x",
                outcome: &o,
                concurrency: false,
            }];
            let mut h = HeaderMap::new();
            add_headers(&mut h, HeaderStyle::Standard, &l);
            let pol = items(&parse(&h, &RATELIMIT_POLICY));
            let st = items(&parse(&h, &RATELIMIT));
            let max = SF_INTEGER_MAX.to_string();
            assert_eq!(pol[0].1, p(&[("q", &max), ("w", &w.to_string())]));
            assert_eq!(st[0].1, p(&[("r", &max), ("t", &t.to_string())]));
        }
        assert_eq!(secs_ceil(0), 0);
        assert_eq!(secs_ceil(1), 1);
        assert_eq!(secs_ceil(SECOND), 1);
        assert_eq!(secs_ceil(SECOND + 1), 2);
        assert_eq!(secs_ceil(u64::MAX), 18_446_744_073_710);
    }

    #[test]
    fn legacy_picks_the_most_restrictive() {
        let a = outcome(100, 60 * SECOND, 50, 30 * SECOND);
        let b = outcome(10, 10 * SECOND, 2, 5 * SECOND);
        let c = outcome(5, 3600 * SECOND, 2, 1800 * SECOND + 1);
        let f = |name, outcome| LimitFigures {
            name,
            outcome,
            concurrency: false,
        };
        let mut h = HeaderMap::new();
        add_headers(
            &mut h,
            HeaderStyle::Legacy,
            &[f("a", &a), f("b", &b), f("c", &c)],
        );
        assert!(h.get(RATELIMIT).is_none() && h.get(RATELIMIT_POLICY).is_none());
        // b and c tie on remaining; c resets later.
        assert_eq!(h.get(X_RATELIMIT_LIMIT).unwrap(), "5");
        assert_eq!(h.get(X_RATELIMIT_REMAINING).unwrap(), "2");
        assert_eq!(h.get(X_RATELIMIT_RESET).unwrap(), "1801");
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Legacy, &[f("a", &a), f("b", &b)]);
        assert_eq!(h.get(X_RATELIMIT_LIMIT).unwrap(), "10");
        assert_eq!(h.get(X_RATELIMIT_RESET).unwrap(), "5");
        // Both: every field; none: nothing; no limits: nothing.
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Both, &[f("a", &a)]);
        assert_eq!(h.len(), 5);
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::None, &[f("a", &a)]);
        add_headers(&mut h, HeaderStyle::Both, &[]);
        assert!(h.is_empty());
    }

    /// The fields as the `core::fmt` version wrote them, char by char: what
    /// the byte-level writer must reproduce exactly.
    fn reference_standard(limits: &[LimitFigures<'_>]) -> (String, String) {
        fn sf_string(out: &mut String, s: &str) {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' | '\\' => {
                        out.push('\\');
                        out.push(c);
                    }
                    ' '..='~' => out.push(c),
                    _ => out.push('?'),
                }
            }
            out.push('"');
        }
        use std::fmt::Write as _;
        let mut policy = String::new();
        let mut state = String::new();
        for (i, l) in limits.iter().enumerate() {
            if i > 0 {
                policy.push_str(", ");
                state.push_str(", ");
            }
            sf_string(&mut policy, l.name);
            let _ = write!(policy, ";q={};w={}", l.quota(), l.window());
            if l.concurrency {
                policy.push_str(";qu=\"concurrent-requests\"");
            }
            sf_string(&mut state, l.name);
            let _ = write!(state, ";r={};t={}", l.remaining(), l.reset());
        }
        (policy, state)
    }

    #[test]
    fn fields_match_the_fmt_reference() {
        let numbers = [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            SECOND - 1,
            SECOND,
            SECOND + 1,
            3_600 * SECOND,
            SF_INTEGER_MAX - 1,
            SF_INTEGER_MAX,
            SF_INTEGER_MAX + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        let names = ["per_client", "a", "in\"fli\\ght", "é\n", "bench_sw", ""];
        let mut outcomes = Vec::new();
        for (i, &a) in numbers.iter().enumerate() {
            let b = numbers[(i * 7 + 3) % numbers.len()];
            let c = numbers[(i * 5 + 1) % numbers.len()];
            outcomes.push(outcome(a, b, c, a));
            outcomes.push(outcome(c, a, b, b));
        }
        for n in 1..=4 {
            for start in 0..outcomes.len() {
                let limits: Vec<LimitFigures<'_>> = (0..n)
                    .map(|j| LimitFigures {
                        name: names[(start + j) % names.len()],
                        outcome: &outcomes[(start + j) % outcomes.len()],
                        concurrency: (start + j) % 3 == 0,
                    })
                    .collect();
                let mut h = HeaderMap::new();
                add_headers(&mut h, HeaderStyle::Standard, &limits);
                let (policy, state) = reference_standard(&limits);
                assert_eq!(h[RATELIMIT_POLICY].as_bytes(), policy.as_bytes());
                assert_eq!(h[RATELIMIT].as_bytes(), state.as_bytes());
            }
        }
        for n in numbers.into_iter().chain(0..=1000) {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn upstream_fields_are_replaced() {
        let a = outcome(1, SECOND, 0, SECOND);
        let mut h = HeaderMap::new();
        h.insert(RATELIMIT, HeaderValue::from_static("\"upstream\";r=9;t=9"));
        h.append(RATELIMIT, HeaderValue::from_static("\"other\";r=9;t=9"));
        h.insert(X_RATELIMIT_LIMIT, HeaderValue::from_static("999"));
        let l = [LimitFigures {
            name: "a",
            outcome: &a,
            concurrency: false,
        }];
        add_headers(&mut h, HeaderStyle::Both, &l);
        assert_eq!(h.get_all(RATELIMIT).iter().count(), 1);
        assert_eq!(h.get(RATELIMIT).unwrap(), "\"a\";r=0;t=1");
        assert_eq!(h.get(X_RATELIMIT_LIMIT).unwrap(), "1");
    }

    #[test]
    fn grpc_requests_are_told_by_their_content_type() {
        let mut req = HeaderMap::new();
        for (ct, grpc) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("Application/GRPC; charset=x", true),
            ("application/grpc-web+proto", true),
            ("application/json", false),
            ("application/grpcx", false),
            ("application/grp", false),
        ] {
            req.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(is_grpc(&req), grpc, "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
