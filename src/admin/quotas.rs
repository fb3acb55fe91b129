//! `PUT`, `GET`, `DELETE /quotas/{limit}/{key}` (docs/configuration/quotas.md):
//! a key's own `limit`, `rate` or `burst` for a limit whose values come
//! `from: store`. A bad value is a 400 with the reason, and changes
//! nothing.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};
use tollgate_limit::algorithm::Rate;
use tollgate_limit::quota::{Quota, QuotaError};

use super::{json, method_not_allowed, store_unavailable, Admin, LimitKey};
use crate::body::Body;
use crate::config::{self, ValueSource};
use crate::json_strict::{self, StrictJsonError};
use crate::limit::policy::Policy;

/// The largest `PUT` body read.
const MAX_BODY: usize = 4096;

/// Answer one `/quotas/{limit}/{key}` request (`rest` is `{limit}/{key}`).
pub(super) async fn handle(req: Request<Incoming>, rest: &str, admin: &Admin) -> Response<Body> {
    let method = req.method().clone();
    if !matches!(method, Method::GET | Method::PUT | Method::DELETE) {
        return method_not_allowed("GET, PUT, DELETE");
    }
    let rt = admin.gateway.shared.runtime.load_full();
    let found = match LimitKey::resolve(&rt, rest, StatusCode::BAD_REQUEST) {
        Ok(found) => found,
        Err((status, body)) => return json(status, body),
    };
    let names = store_values(&found.policy);
    if names.is_empty() {
        return bad(
            "not_per_key",
            format!(
                "limit \"{}\" takes no per-key values from the store (write `limit: {{ default: N, from: store }}`, or rate/burst for buckets)",
                found.limit
            ),
        );
    }
    let limiter = &rt.limiter;
    let key = &found.store_key;
    match method {
        Method::GET => match limiter.quota(key).await {
            Ok(value) => json(StatusCode::OK, described(&found, value.as_ref())),
            Err(error) => store_unavailable(&error),
        },
        Method::DELETE => match limiter.set_quota(key, None).await {
            Ok(had) => json(
                StatusCode::OK,
                json!({"limit": found.limit, "key": found.display, "deleted": had}),
            ),
            Err(error) => store_unavailable(&error),
        },
        _ => {
            let quota = match read_body(req).await.and_then(|v| parse(&v, &names)) {
                Ok(q) => q,
                Err(message) => return bad("bad_value", message),
            };
            if let Err(message) = fits(&found.policy, &quota) {
                return bad("bad_value", message);
            }
            match limiter.set_quota(key, Some(quota)).await {
                Ok(had) => {
                    let mut answer = described(&found, Some(&quota));
                    answer["replaced"] = json!(had);
                    json(StatusCode::OK, answer)
                }
                Err(error) => store_unavailable(&error),
            }
        }
    }
}

/// The values of `policy` keys may have of their own in the store.
fn store_values(policy: &Policy) -> Vec<&'static str> {
    let Some(per_key) = &policy.per_key else {
        return Vec::new();
    };
    [
        ("limit", &per_key.limit),
        ("rate", &per_key.rate),
        ("burst", &per_key.burst),
    ]
    .into_iter()
    .filter(|(_, s)| **s == Some(ValueSource::Store))
    .map(|(n, _)| n)
    .collect()
}

/// 400 with an error code and the reason.
fn bad(error: &str, message: String) -> Response<Body> {
    json(
        StatusCode::BAD_REQUEST,
        json!({"error": error, "message": message}),
    )
}

/// The request's JSON object, at most [`MAX_BODY`] bytes, naming each
/// member once ([`json_strict`]: `{"limit": 100, "limit": 999999}` says
/// two things, and is refused rather than read as either).
async fn read_body(req: Request<Incoming>) -> Result<Map<String, Value>, String> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|_| format!("the body must be a JSON object of at most {MAX_BODY} bytes"))?
        .to_bytes();
    object(&bytes)
}

/// `bytes` as a JSON object that names each member once.
fn object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    match json_strict::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("the body must be a JSON object, like {\"limit\": 5000}".into()),
        Err(StrictJsonError::Repeated(name)) => Err(format!(
            "the member `{name}` is repeated: give each value once"
        )),
        Err(StrictJsonError::Syntax(e)) => Err(format!("the body is not JSON: {e}")),
    }
}

/// The values of `body`: only `names`, at least one, each of its type.
fn parse(body: &Map<String, Value>, names: &[&str]) -> Result<Quota, String> {
    let mut quota = Quota::default();
    if body.is_empty() {
        return Err(format!("give at least one of {}", names.join(", ")));
    }
    for (name, value) in body {
        if !names.contains(&name.as_str()) {
            return Err(format!(
                "unknown field `{name}`: this limit takes {} per key",
                names.join(", ")
            ));
        }
        match name.as_str() {
            "rate" => quota.rate = Some(rate(value)?),
            "limit" => quota.limit = Some(count(name, value)?),
            _ => quota.burst = Some(count(name, value)?),
        }
    }
    Ok(quota)
}

/// A count: a whole number, at least 1.
fn count(name: &str, value: &Value) -> Result<u64, String> {
    match value {
        Value::Number(n) => match n.as_u64() {
            Some(0) => Err(format!("{name} must be at least 1, got 0")),
            Some(v) => Ok(v),
            None if n.as_i64().is_some() => Err(format!("{name} must be at least 1, got {n}")),
            None => Err(format!("{name} must be a whole number, got {n}")),
        },
        other => Err(format!("{name} must be a number, got {other}")),
    }
}

/// A rate: `"100/s"`, `"5/10s"`.
fn rate(value: &Value) -> Result<Rate, String> {
    let Value::String(text) = value else {
        return Err(format!("rate must be a string like \"100/s\", got {value}"));
    };
    let written: config::Rate = text.parse().map_err(|e: String| format!("rate: {e}"))?;
    written.to_limit().map_err(|e| format!("rate: {e}"))
}

/// Whether `quota` makes valid parameters for `policy` (and its overrides),
/// and every request's cost still fits.
fn fits(policy: &Policy, quota: &Quota) -> Result<(), String> {
    let all = std::iter::once(&policy.params).chain(policy.overrides.iter().map(|(_, p)| p));
    for params in all {
        let under = params.with_quota(quota).map_err(|e| match e {
            QuotaError::Param(p) => p.to_string(),
            other => other.to_string(),
        })?;
        if let Some(capacity) = under.capacity() {
            if policy.cost > capacity {
                return Err(format!(
                    "the limit's cost per request is {}: a capacity of {capacity} would reject every request",
                    policy.cost
                ));
            }
        }
    }
    Ok(())
}

/// The answer of `GET` and `PUT`: the key's own values (`null`: none), the
/// defaults, and what applies.
fn described(found: &LimitKey, value: Option<&Quota>) -> Value {
    let params = &found.policy.params;
    let effective = params.under(value).quota_values();
    json!({
        "limit": found.limit,
        "key": found.display,
        "value": value.map(shown),
        "default": shown(&params.quota_values()),
        "effective": shown(&effective),
    })
}

/// A quota's values as JSON: `limit` and `burst` as numbers, `rate` as
/// written in a config (`"100/s"`).
fn shown(q: &Quota) -> Value {
    let mut out = Map::new();
    if let Some(l) = q.limit {
        out.insert("limit".into(), json!(l));
    }
    if let Some(r) = q.rate {
        let written = config::Rate {
            count: r.count(),
            period: Duration::from_micros(r.period()),
        };
        out.insert("rate".into(), json!(written.to_string()));
    }
    if let Some(b) = q.burst {
        out.insert("burst".into(), json!(b));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_names_each_member_once() {
        let map = object(br#"{"limit": 100, "burst": 5}"#).unwrap();
        assert_eq!(map["limit"], 100);
        for body in [
            r#"{"limit": 100, "limit": 999999}"#,
            r#"{"limit": 100, "limit": 100}"#,
            r#"{"\u006cimit": 1, "limit": 2}"#,
        ] {
            let err = object(body.as_bytes()).unwrap_err();
            assert_eq!(err, "the member `limit` is repeated: give each value once");
        }
        assert!(object(b"[1]").unwrap_err().contains("a JSON object"));
        assert!(object(b"{").unwrap_err().contains("not JSON"));
    }
}
