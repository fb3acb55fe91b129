//! Rate-limit header values (draft-ietf-httpapi-ratelimit-headers-11, its
//! draft-10 figures, and the `X-RateLimit-*` convention) for a decision's
//! [`Figure`]s, as bytes and numbers: the caller puts them in whatever
//! header type its HTTP stack has (the gateway: `src/limit/headers.rs`).
//!
//! `standard` is two RFC 9651 structured-field Lists, one item per limit,
//! named by the limit's name (draft 11 keeps draft 10's wire syntax):
//!
//! ```text
//! RateLimit-Policy: "per_client";q=20;w=2, "login";q=5;w=60
//! RateLimit: "per_client";r=17;t=1, "login";r=4;t=42
//! ```
//!
//! `w` and `t` are whole seconds rounded up, `w >= 1`. Draft 11's `t` is
//! the time until the available quota next grows, at least 1
//! ([`Outcome::grows_after`](crate::Outcome::grows_after)): a client that
//! takes at most `r` within the next `t` seconds is not rejected by that
//! limit; on a rejection it is the wait, as `Retry-After`. The `draft10`
//! style sends draft 10's `t` instead, the time until the quota is whole
//! again, `t <= w` ([`Outcome::reset`](crate::Outcome::reset)). A
//! `concurrency` limit adds `qu="concurrent-requests"`. `legacy` is
//! `X-RateLimit-Limit` / `-Remaining` / `-Reset` (draft 10's `t`) for the
//! most restrictive limit. A figure whose status is [`Status::Undecided`]
//! (its Redis Cluster slot could not answer) is left out rather than shown
//! as `q=0`.

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
    /// `RateLimit-Policy` and `RateLimit` with draft 11's figures
    /// (draft-ietf-httpapi-ratelimit-headers-11).
    Standard,
    /// The same two fields with draft 10's figures (`t` until the quota is
    /// whole again), for clients pinned to that draft.
    Draft10,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    Legacy,
    /// `standard` and `legacy`.
    Both,
    /// No rate-limit headers.
    None,
}

/// Which draft's figures `RateLimit` carries: they differ in `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draft {
    /// Draft 11: `t` is the time until the available quota next grows
    /// ([`Outcome::grows_after`](crate::Outcome::grows_after)), at least 1.
    Eleven,
    /// Draft 10: `t` is the time until the quota is whole again
    /// ([`Outcome::reset`](crate::Outcome::reset)), at most `w`.
    Ten,
}

impl HeaderStyle {
    /// Whether `RateLimit-Policy` and `RateLimit` are sent, and with which
    /// draft's figures.
    pub fn standard(self) -> Option<Draft> {
        match self {
            HeaderStyle::Standard | HeaderStyle::Both => Some(Draft::Eleven),
            HeaderStyle::Draft10 => Some(Draft::Ten),
            HeaderStyle::Legacy | HeaderStyle::None => None,
        }
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

/// Draft 10's `t` (and `X-RateLimit-Reset`): whole seconds, rounded up,
/// never more than `w`.
fn reset(f: &Figure) -> u64 {
    secs_ceil(f.outcome.reset).min(window(f))
}

/// The `t` of `draft`: draft 11's whole seconds rounded up, at least 1
/// (and equal to `Retry-After` on a rejection, so not capped at `w`), or
/// draft 10's [`reset`].
fn t(f: &Figure, draft: Draft) -> u64 {
    match draft {
        Draft::Eleven => secs_ceil(f.outcome.grows_after).clamp(1, SF_INTEGER_MAX),
        Draft::Ten => reset(f),
    }
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

/// `RateLimit-Policy` and `RateLimit` with `draft`'s figures, in that
/// order; `None` when no figure is shown. Both values share one buffer:
/// one allocation for the text and one for the handle.
pub fn standard(figures: &[Figure], draft: Draft) -> Option<(Bytes, Bytes)> {
    standard_with_units(figures, draft, |_| None)
}

/// What a limit counts, when it is not requests: the parameter its
/// `RateLimit-Policy` item carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Body bytes: `qu="content-bytes"` (a quota unit draft 11 registers).
    ContentBytes,
    /// LLM tokens: `tollgate-unit="tokens"` (draft 11 registers no token
    /// unit, so a vendor parameter).
    Tokens,
}

impl Unit {
    /// The parameter, `;` included.
    fn param(self) -> &'static [u8] {
        match self {
            Unit::ContentBytes => b";qu=\"content-bytes\"",
            Unit::Tokens => b";tollgate-unit=\"tokens\"",
        }
    }
}

/// [`standard`], each figure's policy item carrying the unit `unit`
/// gives it (`None`: requests, or `concurrent-requests` for a
/// `concurrency` limit).
pub fn standard_with_units(
    figures: &[Figure],
    draft: Draft,
    unit: impl Fn(&Figure) -> Option<Unit>,
) -> Option<(Bytes, Bytes)> {
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
        } else if let Some(u) = unit(f) {
            buf.extend_from_slice(u.param());
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
            [(b";r=", remaining(f)), (b";t=", t(f, draft))],
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
        if let Some(draft) = style.standard() {
            if let Some((policy, state)) = standard(figures, draft) {
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
            local: false,
        }
    }

    fn text(h: &Fields, name: &str) -> String {
        String::from_utf8(h[name].clone()).unwrap()
    }

    /// An allowed outcome whose draft-10 and draft-11 `t` are both `reset`.
    fn outcome(limit: u64, window: Micros, remaining: u64, reset: Micros) -> Outcome {
        Outcome {
            status: Status::Allowed,
            lock_started: false,
            delay: 0,
            limit,
            window,
            remaining,
            reset,
            grows_after: reset,
            retry_after: 0,
            at: 0,
            taken: 0,
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
            vec![("in\"fli\\ght".into(), p(&[("r", "3"), ("t", "1")]))],
            "draft 11's t is never 0"
        );
        // A name outside visible ASCII still gives a valid field.
        let limits = [figure("é\n", &c, false)];
        add(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(items(&parse(&h, RATELIMIT))[0].0, "??");
    }

    #[test]
    fn draft11_and_draft10_differ_in_t() {
        // A token bucket of 10 with 3 left: the next token in 1.5 s, whole
        // again in 6.5 s; a rejection whose wait (90 s) outlasts w.
        let mut allowed = outcome(10, 10 * SECOND, 3, 6_500_000);
        allowed.grows_after = 1_500_000;
        let mut rejected = outcome(5, 60 * SECOND, 0, 60 * SECOND);
        rejected.status = Status::Rejected;
        rejected.retry_after = 90 * SECOND;
        rejected.grows_after = 90 * SECOND;
        let limits = [figure("b", &allowed, false), figure("l", &rejected, false)];
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Standard, &limits);
        assert_eq!(text(&h, RATELIMIT), r#""b";r=3;t=2, "l";r=0;t=90"#);
        let policy = text(&h, RATELIMIT_POLICY);
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Draft10, &limits);
        assert_eq!(text(&h, RATELIMIT), r#""b";r=3;t=7, "l";r=0;t=60"#);
        assert_eq!(text(&h, RATELIMIT_POLICY), policy, "the same policies");
        assert!(
            !h.contains_key(X_RATELIMIT_RESET),
            "draft10 sends no legacy field"
        );
        // Both: draft 11's fields, and the legacy reset of draft 10.
        let mut h = Fields::new();
        add(&mut h, HeaderStyle::Both, &limits);
        assert_eq!(text(&h, RATELIMIT), r#""b";r=3;t=2, "l";r=0;t=90"#);
        assert_eq!(text(&h, X_RATELIMIT_RESET), "60");
        // Draft 11's t: rounded up, at least 1.
        for (grows, t) in [
            (0, 1),
            (1, 1),
            (SECOND, 1),
            (SECOND + 1, 2),
            (u64::MAX, u64::MAX.div_ceil(SECOND)),
        ] {
            let mut o = outcome(1, SECOND, 0, 0);
            o.grows_after = grows;
            let mut h = Fields::new();
            add(&mut h, HeaderStyle::Standard, &[figure("x", &o, false)]);
            assert_eq!(text(&h, RATELIMIT), format!("\"x\";r=0;t={t}"));
        }
    }

    #[test]
    fn header_styles_read_from_config_words() {
        for (word, style, draft) in [
            ("standard", HeaderStyle::Standard, Some(Draft::Eleven)),
            ("draft10", HeaderStyle::Draft10, Some(Draft::Ten)),
            ("legacy", HeaderStyle::Legacy, None),
            ("both", HeaderStyle::Both, Some(Draft::Eleven)),
            ("none", HeaderStyle::None, None),
        ] {
            let parsed: HeaderStyle =
                serde::Deserialize::deserialize(serde::de::value::StrDeserializer::<
                    serde::de::value::Error,
                >::new(word))
                .unwrap();
            assert_eq!((parsed, parsed.standard()), (style, draft), "{word}");
            assert_eq!(
                style.legacy(),
                matches!(style, HeaderStyle::Legacy | HeaderStyle::Both)
            );
        }
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
            add(&mut h, HeaderStyle::Draft10, &l);
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
    fn reference_standard(limits: &[Figure], draft: Draft) -> (String, String) {
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
            let t = match draft {
                Draft::Eleven => secs_ceil(l.outcome.grows_after).clamp(1, SF_INTEGER_MAX),
                Draft::Ten => secs_ceil(l.outcome.reset).min(window(l)),
            };
            let _ = write!(state, ";r={};t={t}", remaining(l));
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
            let mut o = outcome(a, b, c, a);
            o.grows_after = c;
            outcomes.push(o);
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
                for (style, draft) in [
                    (HeaderStyle::Standard, Draft::Eleven),
                    (HeaderStyle::Draft10, Draft::Ten),
                ] {
                    let mut h = Fields::new();
                    add(&mut h, style, &limits);
                    let (policy, state) = reference_standard(&limits, draft);
                    assert_eq!(h[RATELIMIT_POLICY], policy.as_bytes());
                    assert_eq!(h[RATELIMIT], state.as_bytes());
                }
            }
        }
        for n in numbers.into_iter().chain(0..=1000) {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
