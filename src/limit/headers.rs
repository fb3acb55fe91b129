//! Rate-limit response fields (docs/configuration/limit-response.md) on a response: the values
//! `tollgate_limit::headers` writes for a decision's figures, as
//! `RateLimit-Policy` / `RateLimit` (standard: draft 11's figures, or
//! draft10), `X-RateLimit-*` (legacy), both or none. The gateway's fields replace any of the same name from the
//! upstream, so a client never sees two answers for one quota.

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Response};
use tollgate_limit::headers::{self as fields, HeaderStyle};
use tollgate_limit::Figure;

use crate::config::CostUnit;
use crate::limit::policy::Policy;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static(fields::RATELIMIT_POLICY);
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static(fields::RATELIMIT);
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static(fields::X_RATELIMIT_LIMIT);
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static(fields::X_RATELIMIT_REMAINING);
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static(fields::X_RATELIMIT_RESET);

/// Add the rate-limit fields of `style` for `figures` to `response`.
pub fn add_limit_headers<B>(response: &mut Response<B>, style: HeaderStyle, figures: &[Figure]) {
    add_headers(response.headers_mut(), style, figures, &[]);
}

/// [`add_limit_headers`] for a route's `limits`: a cost limit's policy
/// item says what it counts (tokens, bytes; docs/configuration/cost.md).
pub fn add_route_limit_headers<B>(
    response: &mut Response<B>,
    style: HeaderStyle,
    figures: &[Figure],
    limits: &[std::sync::Arc<Policy>],
) {
    add_headers(response.headers_mut(), style, figures, limits);
}

/// The unit of the figure's limit among `limits`, when it counts tokens or
/// bytes.
fn unit_of(f: &Figure, limits: &[std::sync::Arc<Policy>]) -> Option<fields::Unit> {
    let policy = limits
        .iter()
        .find(|p| std::sync::Arc::ptr_eq(&p.name, &f.name))?;
    match policy.metered.as_ref()?.unit() {
        CostUnit::Tokens => Some(fields::Unit::Tokens),
        CostUnit::Bytes => Some(fields::Unit::ContentBytes),
        CostUnit::Units => None,
    }
}

/// Add `RateLimit-Policy` and `RateLimit` (standard, or draft10 with draft
/// 10's `t`; a cost limit among `limits` with its unit), `X-RateLimit-*` (legacy, for the most restrictive limit),
/// both, or none, for the
/// figures the fields show (a limit whose figures are unknown is left
/// out). No figures, no fields. Fields of these names already in `headers`
/// are replaced.
pub fn add_headers(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    figures: &[Figure],
    limits: &[std::sync::Arc<Policy>],
) {
    if figures.is_empty() {
        return;
    }
    if let Some(draft) = style.standard() {
        let standard = if limits.iter().any(|p| p.metered.is_some()) {
            fields::standard_with_units(figures, draft, |f| unit_of(f, limits))
        } else {
            fields::standard(figures, draft)
        };
        if let Some((policy, state)) = standard {
            insert_bytes(headers, RATELIMIT_POLICY, policy);
            insert_bytes(headers, RATELIMIT, state);
        }
    }
    if style.legacy() {
        if let Some(most) = fields::legacy(figures) {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(most.limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(most.remaining));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(most.reset));
        }
    }
}

/// Makes `value` a header value without copying it.
fn insert_bytes(headers: &mut HeaderMap, name: HeaderName, value: bytes::Bytes) {
    // Only visible ASCII is ever written, so this cannot fail; if it did,
    // the field is left out rather than the request failing.
    if let Ok(v) = HeaderValue::from_maybe_shared(value) {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use tollgate_limit::algorithm::SECOND;
    use tollgate_limit::{Outcome, Status};

    fn figure(name: &str, status: Status, limit: u64, remaining: u64) -> Figure {
        Figure {
            name: Arc::from(name),
            outcome: Outcome {
                status,
                lock_started: false,
                delay: 0,
                limit,
                window: SECOND,
                remaining,
                reset: SECOND,
                grows_after: 2 * SECOND,
                retry_after: 0,
                at: 0,
                taken: 0,
            },
            concurrency: false,
            key: [0; 16],
            local: false,
        }
    }

    #[test]
    fn upstream_fields_are_replaced() {
        let mut h = HeaderMap::new();
        h.insert(RATELIMIT, HeaderValue::from_static("\"upstream\";r=9;t=9"));
        h.append(RATELIMIT, HeaderValue::from_static("\"other\";r=9;t=9"));
        h.insert(X_RATELIMIT_LIMIT, HeaderValue::from_static("999"));
        add_headers(
            &mut h,
            HeaderStyle::Both,
            &[figure("a", Status::Allowed, 1, 0)],
            &[],
        );
        assert_eq!(h.get_all(RATELIMIT).iter().count(), 1);
        assert_eq!(h.get(RATELIMIT).unwrap(), "\"a\";r=0;t=2");
        assert_eq!(h.get(RATELIMIT_POLICY).unwrap(), "\"a\";q=1;w=1");
        assert_eq!(h.get(X_RATELIMIT_LIMIT).unwrap(), "1");
        assert_eq!(h.get(X_RATELIMIT_REMAINING).unwrap(), "0");
        assert_eq!(h.get(X_RATELIMIT_RESET).unwrap(), "1");
    }

    #[test]
    fn undecided_limits_are_left_out_and_none_means_nothing() {
        let figures = [
            figure("gone", Status::Undecided, 0, 0),
            figure("b", Status::Rejected, 5, 0),
        ];
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Both, &figures, &[]);
        assert_eq!(h.get(RATELIMIT).unwrap(), "\"b\";r=0;t=2");
        assert_eq!(h.get(X_RATELIMIT_LIMIT).unwrap(), "5");
        let mut h = HeaderMap::new();
        add_headers(&mut h, HeaderStyle::Both, &figures[..1], &[]);
        add_headers(&mut h, HeaderStyle::None, &figures, &[]);
        add_headers(&mut h, HeaderStyle::Both, &[], &[]);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn draft10_sends_draft_10s_t_and_no_legacy_fields() {
        let mut h = HeaderMap::new();
        add_headers(
            &mut h,
            HeaderStyle::Draft10,
            &[figure("a", Status::Allowed, 4, 3)],
            &[],
        );
        assert_eq!(h.get(RATELIMIT).unwrap(), "\"a\";r=3;t=1");
        assert_eq!(h.get(RATELIMIT_POLICY).unwrap(), "\"a\";q=4;w=1");
        assert_eq!(h.len(), 2, "{h:?}");
    }
}
