//! Rate-limit header values (draft-ietf-httpapi-ratelimit-headers-10 and
//! the `X-RateLimit-*` convention) for a decision's [`Figure`]s, as bytes
//! and numbers: the caller puts them in whatever header type its HTTP stack
//! has (the gateway: `src/limit/headers.rs`).
//!
//! `standard` is two RFC 9651 structured-field Lists, one item per limit,
//! named by the limit's name:
//!
//! ```text
//! RateLimit-Policy: "per_client";q=20;w=2, "login";q=5;w=60
//! RateLimit: "per_client";r=17;t=1, "login";r=4;t=42
//! ```
//!
//! `w` and `t` are whole seconds rounded up, `w >= 1`, `t <= w`; a
//! `concurrency` limit adds `qu="concurrent-requests"`. `legacy` is
//! `X-RateLimit-Limit` / `-Remaining` / `-Reset` for the most restrictive
//! limit. A figure whose status is [`Status::Undecided`] (its Redis
//! Cluster slot could not answer) is left out rather than shown as `q=0`.

use std::cmp::Reverse;

use bytes::Bytes;

use crate::algorithm::SECOND;
use crate::{Figure, Micros, Status};

/// `RateLimit-Policy`, as a lowercase field name.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit`.
pub const RATELIMIT: &str = "ratelimit";
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";
/// The largest RFC 9651 Integer.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Which rate-limit fields a response carries (`limit_response.headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    Standard,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    Legacy,
    /// Both sets.
    Both,
    /// No rate-limit headers.
    None,
}

impl HeaderStyle {
    /// Whether `RateLimit-Policy` and `RateLimit` are sent.
    pub fn standard(self) -> bool {
        matches!(self, HeaderStyle::Standard | HeaderStyle::Both)
    }

    /// Whether `X-RateLimit-*` are sent.
    pub fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::Both)
    }
}

/// The `X-RateLimit-*` values of the most restrictive limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Legacy {
    /// `X-RateLimit-Limit`: its `q`.
    pub limit: u64,
    /// `X-RateLimit-Remaining`: its `r`.
    pub remaining: u64,
    /// `X-RateLimit-Reset`: its `t`, in seconds.
    pub reset: u64,
}

/// `q`.
fn quota(f: &Figure) -> u64 {
    f.outcome.limit.min(SF_INTEGER_MAX)
}

/// `w`: whole seconds, rounded up, at least 1.
fn window(f: &Figure) -> u64 {
    secs_ceil(f.outcome.window).clamp(1, SF_INTEGER_MAX)
}

/// `r`.
fn remaining(f: &Figure) -> u64 {
    f.outcome.remaining.min(SF_INTEGER_MAX)
}

/// `t`: whole seconds, rounded up, never more than `w`.
fn reset(f: &Figure) -> u64 {
    secs_ceil(f.outcome.reset).min(window(f))
}

/// Whole seconds, rounded up.
pub fn secs_ceil(us: Micros) -> u64 {
    us.div_ceil(SECOND)
}

/// The figures the fields show: all but the undecided ones.
fn shown(figures: &[Figure]) -> impl Iterator<Item = &Figure> {
    figures
        .iter()
        .filter(|f| f.outcome.status != Status::Undecided)
}

/// `RateLimit-Policy` and `RateLimit`, in that order; `None` when no
/// figure is shown. Both values share one buffer: one allocation for the
/// text and one for the handle.
pub fn standard(figures: &[Figure]) -> Option<(Bytes, Bytes)> {
    // Room for every figure's name twice, and the numbers.
    let names: usize = figures.iter().map(|f| f.name.len() + 4).sum();
    let mut buf = Vec::with_capacity(2 * names + figures.len() * 96);
    let mut shown_count = 0;
    for f in shown(figures) {
        push_item(
            &mut buf,
            shown_count,
            &f.name,
            [(b";q=", quota(f)), (b";w=", window(f))],
        );
        if f.concurrency {
            buf.extend_from_slice(b";qu=\"concurrent-requests\"");
        }
        shown_count += 1;
    }
    if shown_count == 0 {
        return None;
    }
    let policy_len = buf.len();
    for (i, f) in shown(figures).enumerate() {
        push_item(
            &mut buf,
            i,
            &f.name,
            [(b";r=", remaining(f)), (b";t=", reset(f))],
        );
    }
    let mut state = Bytes::from(buf);
    let policy = state.split_to(policy_len);
    Some((policy, state))
}

/// The `X-RateLimit-*` values: for the limit with the least `remaining`,
/// ties to the longest reset; `None` when no figure is shown.
pub fn legacy(figures: &[Figure]) -> Option<Legacy> {
    let most = shown(figures).min_by_key(|f| (f.outcome.remaining, Reverse(f.outcome.reset)))?;
    Some(Legacy {
        limit: quota(most),
        remaining: remaining(most),
        reset: reset(most),
    })
}

/// The `index`th item of a list: `, ` unless it is the first, the name as
/// an sf-string, then each `;key=` and its integer.
// Always inlined: called, it made the fields ~450 instructions dearer per
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::Outcome;
    use sfv::{BareItem, List, ListEntry, Parser};

    /// The fields `style` gives for `figures`, as a header map holds them.
    type Fields = BTreeMap<&'static str, Vec<u8>>;

    fn add(h: &mut Fields, style: HeaderStyle, figures: &[Figure]) {
        if style.standard() {
            if let Some((policy, state)) = standard(figures) {
                h.insert(RATELIMIT_POLICY, policy.to_vec());
                h.insert(RATELIMIT, state.to_vec());
            }
        }
        if style.legacy() {
            if let Some(l) = legacy(figures) {
                h.insert(X_RATELIMIT_LIMIT, l.limit.to_string().into_bytes());
                h.insert(X_RATELIMIT_REMAINING, l.remaining.to_string().into_bytes());
                h.insert(X_RATELIMIT_RESET, l.reset.to_string().into_bytes());
            }
        }
    }

    fn figure(name: &str, outcome: &Outcome, concurrency: bool) -> Figure {
        Figure {
            name: Arc::from(name),
            outcome: *outcome,
            concurrency,
            key: [0; 16],
        }
    }

    fn text(h: &Fields, name: &str) -> String {
        String::from_utf8(h[name].clone()).unwrap()
    }

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

    fn parse(headers: &Fields, name: &str) -> List {
        let v = headers.get(name).expect("field present");
        Parser::new(v).parse().expect("a valid sf-list")
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
        let limits = [figure("per_client", &a, false), figure("login", &b, false)];
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(
            text(&h, RATELIMIT_POLICY),
            r#""per_client";q=20;w=2, "login";q=5;w=60"#
        );
        assert_eq!(
            text(&h, RATELIMIT),
            r#""per_client";r=17;t=1, "login";r=4;t=42"#
        );
        assert_eq!(
            items(&parse(&h, RATELIMIT_POLICY)),
            vec![
                ("per_client".into(), p(&[("q", "20"), ("w", "2")])),
                ("login".into(), p(&[("q", "5"), ("w", "60")])),
            ]
        );
        assert_eq!(
            items(&parse(&h, RATELIMIT)),
            vec![
                ("per_client".into(), p(&[("r", "17"), ("t", "1")])),
                ("login".into(), p(&[("r", "4"), ("t", "42")])),
            ]
        );
        assert!(!h.contains_key(X_RATELIMIT_LIMIT));
    }

    #[test]
    fn concurrency_and_awkward_names() {
        let c = outcome(10, 300 * SECOND, 3, 0);
        let limits = [figure("in\"fli\\ght", &c, true)];
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Both, &limits);
        assert_eq!(
            items(&parse(&h, RATELIMIT_POLICY)),
            vec![(
                "in\"fli\\ght".into(),
                p(&[("q", "10"), ("w", "300"), ("qu", "\"concurrent-requests\"")])
            )]
        );
        assert_eq!(
            items(&parse(&h, RATELIMIT)),
            vec![("in\"fli\\ght".into(), p(&[("r", "3"), ("t", "0")]))]
        );
        // A name outside visible ASCII still gives a valid field.
        let limits = [figure("é\n", &c, false)];
        add(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(items(&parse(&h, RATELIMIT))[0].0, "??");
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
            let l = [figure("x", &o, false)];
            let mut h = Fields::new();
            add(&mut h, HeaderStyle::Standard, &l);
            let pol = items(&parse(&h, RATELIMIT_POLICY));
            let st = items(&parse(&h, RATELIMIT));
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
        let f = |name, outcome| figure(name, outcome, false);
        let mut h = Fields::new();
        add(
            &mut h,
            HeaderStyle::Legacy,
            &[f("a", &a), f("b", &b), f("c", &c)],
        );
        assert!(!h.contains_key(RATELIMIT) && !h.contains_key(RATELIMIT_POLICY));
        // b and c tie on remaining; c resets later.
        assert_eq!(text(&h, X_RATELIMIT_LIMIT), "5");
        assert_eq!(text(&h, X_RATELIMIT_REMAINING), "2");
        assert_eq!(text(&h, X_RATELIMIT_RESET), "1801");
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Legacy, &[f("a", &a), f("b", &b)]);
        assert_eq!(text(&h, X_RATELIMIT_LIMIT), "10");
        assert_eq!(text(&h, X_RATELIMIT_RESET), "5");
        // Both: every field; none: nothing; no limits: nothing.
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Both, &[f("a", &a)]);
        assert_eq!(h.len(), 5);
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::None, &[f("a", &a)]);
        add(&mut h, HeaderStyle::Both, &[]);
        assert!(h.is_empty());
    }

    /// The fields as the `core::fmt` version wrote them, char by char: what
    /// the byte-level writer must reproduce exactly.
    fn reference_standard(limits: &[Figure]) -> (String, String) {
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
            sf_string(&mut policy, &l.name);
            let _ = write!(policy, ";q={};w={}", quota(l), window(l));
            if l.concurrency {
                policy.push_str(";qu=\"concurrent-requests\"");
            }
            sf_string(&mut state, &l.name);
            let _ = write!(state, ";r={};t={}", remaining(l), reset(l));
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
                let limits: Vec<Figure> = (0..n)
                    .map(|j| {
                        figure(
                            names[(start + j) % names.len()],
                            &outcomes[(start + j) % outcomes.len()],
                            (start + j) % 3 == 0,
                        )
                    })
                    .collect();
                let mut h = Fields::new();
                add(&mut h, HeaderStyle::Standard, &limits);
                let (policy, state) = reference_standard(&limits);
                assert_eq!(h[RATELIMIT_POLICY], policy.as_bytes());
                assert_eq!(h[RATELIMIT], state.as_bytes());
            }
        }
        for n in numbers.into_iter().chain(0..=1000) {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
