//! Helpers for the throttling tests: clients bound to `127.0.0.x`, the
//! rate-limit fields parsed as RFC 9651 structured fields (the `sfv` crate),
//! the rejection shape (docs/configuration/limit-response.md), window alignment
//! on the wall clock, and the admin `/limits` and `/lockouts` endpoints
//! (docs/operations.md).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{Method, Request};
use serde_json::Value;

use super::client::{self, HttpClient, Resp};
use super::{Gateway, OneRoute};

/// `/` under `lk`: one request per minute per client address, and the
/// first rejection locks the client out for 60 s.
pub fn one_strike() -> OneRoute {
    OneRoute::new().limit(
        "lk",
        "{ algorithm: token_bucket, rate: 1/m, burst: 1, key: client_ip, lockout: { after: 1, duration: 60s } }",
    )
}

/// `127.0.0.n`: one distinct client per `n` (Linux routes all of 127/8 to
/// loopback).
pub fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// A pooled HTTP/1.1 client talking to one gateway address, optionally from
/// a chosen source address.
#[derive(Clone)]
pub struct Caller {
    pub client: HttpClient,
    pub addr: SocketAddr,
}

impl Caller {
    /// From the default source address (127.0.0.1).
    pub fn new(addr: SocketAddr) -> Caller {
        Caller {
            client: client::h1(),
            addr,
        }
    }

    /// From `127.0.0.n`.
    pub fn from(addr: SocketAddr, n: u8) -> Caller {
        Caller {
            client: client::h1_from(lo(n)),
            addr,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Resp {
        self.get_h(path, &[]).await
    }

    /// `GET path` with extra headers.
    pub async fn get_h(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut b = client::req(Method::GET, self.addr, path);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        client::send(&self.client, b.body(client::empty()).unwrap()).await
    }

    /// `GET path` with extra headers; errors reported.
    pub async fn try_get_h(&self, path: &str, headers: &[(&str, &str)]) -> Result<Resp, String> {
        let mut b = client::req(Method::GET, self.addr, path);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        client::try_send(&self.client, b.body(client::empty()).unwrap()).await
    }

    /// `n` sequential `GET path`s; their statuses.
    pub async fn statuses(&self, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.get_h(path, headers).await.status.as_u16());
        }
        out
    }
}

/// A parameter value of a structured-field item.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(i64),
    Str(String),
    Other(String),
}

/// The items of a structured-field List header: (item string value,
/// parameters), in order. `None` if the header is absent. Panics if it does
/// not parse as an RFC 9651 List of String items.
pub fn sf_items(r: &Resp, field: &str) -> Option<Vec<(String, BTreeMap<String, Param>)>> {
    let lines: Vec<&str> = r
        .headers
        .get_all(field)
        .iter()
        .map(|v| v.to_str().expect("rate-limit field is not visible ASCII"))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let joined = lines.join(", ");
    let list: sfv::List = sfv::Parser::new(&joined)
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {joined:?} is not an RFC 9651 List: {e}"));
    let mut out = Vec::new();
    for entry in list {
        let item = match entry {
            sfv::ListEntry::Item(item) => item,
            sfv::ListEntry::InnerList(l) => panic!("{field}: unexpected inner list {l:?}"),
        };
        let name = item
            .bare_item
            .as_string()
            .unwrap_or_else(|| panic!("{field}: item {:?} is not a String", item.bare_item))
            .as_str()
            .to_string();
        let mut params = BTreeMap::new();
        for (k, v) in &item.params {
            let p = if let Some(i) = v.as_integer() {
                Param::Int(i64::from(i))
            } else if let Some(s) = v.as_string() {
                Param::Str(s.as_str().to_string())
            } else {
                Param::Other(format!("{v:?}"))
            };
            params.insert(k.as_str().to_string(), p);
        }
        out.push((name, params));
    }
    Some(out)
}

/// One limit's figures from `RateLimit-Policy` and `RateLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rl {
    pub q: i64,
    pub w: i64,
    pub r: i64,
    pub t: i64,
    /// `qu` (quota unit), if given.
    pub qu: Option<String>,
}

fn int_param(field: &str, limit: &str, params: &BTreeMap<String, Param>, k: &str) -> i64 {
    match params.get(k) {
        Some(Param::Int(i)) => *i,
        other => panic!("{field} item {limit:?}: parameter {k} is not an Integer: {other:?}"),
    }
}

/// The names of the items of `RateLimit-Policy` in order (empty if absent).
pub fn policy_names(r: &Resp) -> Vec<String> {
    sf_items(r, "ratelimit-policy")
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// The figures of `limit` in the standard fields, or `None` if neither field
/// names it. Panics if only one does, or a parameter is not an integer.
pub fn rl_opt(r: &Resp, limit: &str) -> Option<Rl> {
    let policy = sf_items(r, "ratelimit-policy").unwrap_or_default();
    let state = sf_items(r, "ratelimit").unwrap_or_default();
    let p = policy.iter().find(|(n, _)| n == limit);
    let s = state.iter().find(|(n, _)| n == limit);
    match (p, s) {
        (None, None) => None,
        (Some((_, p)), Some((_, s))) => {
            let rl = Rl {
                q: int_param("RateLimit-Policy", limit, p, "q"),
                w: int_param("RateLimit-Policy", limit, p, "w"),
                r: int_param("RateLimit", limit, s, "r"),
                t: int_param("RateLimit", limit, s, "t"),
                qu: match p.get("qu") {
                    None => None,
                    Some(Param::Str(s)) => Some(s.clone()),
                    Some(other) => panic!("qu of {limit:?} is not a String: {other:?}"),
                },
            };
            assert!(rl.w >= 1, "{limit}: w must be >= 1: {rl:?}");
            // (Draft 11's t may exceed w on a rejection: it is the wait.)
            assert!(rl.q >= 0 && rl.r >= 0 && rl.t >= 0, "{limit}: {rl:?}");
            Some(rl)
        }
        _ => panic!(
            "limit {limit:?} in only one of RateLimit-Policy / RateLimit: {:?}",
            r.headers
        ),
    }
}

/// The figures of `limit`; panics if absent.
pub fn rl(r: &Resp, limit: &str) -> Rl {
    rl_opt(r, limit).unwrap_or_else(|| {
        panic!(
            "no rate-limit fields for {limit:?}: status {} headers {:?} body {:?}",
            r.status,
            r.headers,
            r.text()
        )
    })
}

/// `r` of `limit`.
pub fn remaining(r: &Resp, limit: &str) -> i64 {
    rl(r, limit).r
}

/// Whether the response carries any rate-limit field (standard or legacy).
pub fn has_rate_limit_fields(r: &Resp) -> bool {
    [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ]
    .iter()
    .any(|h| r.headers.contains_key(*h))
}

/// Asserts a 200.
#[track_caller]
pub fn assert_ok(r: &Resp) {
    assert_eq!(
        r.status.as_u16(),
        200,
        "expected 200, got {} headers {:?} body {:?}",
        r.status,
        r.headers,
        r.text()
    );
}

/// Asserts a rejection (docs/configuration/limit-response.md): 429, JSON
/// `{error, limit, retry_after, request_id}`, `Retry-After` = `retry_after`
/// (whole seconds, >= 1), `Cache-Control: no-store`, and, when the standard
/// fields name the limit, `Retry-After >= t`. Returns `Retry-After`.
#[track_caller]
pub fn assert_rejected(r: &Resp, error: &str, limit: &str) -> u64 {
    assert_rejected_status(r, 429, error, limit)
}

/// [`assert_rejected`] with another status.
#[track_caller]
pub fn assert_rejected_status(r: &Resp, status: u16, error: &str, limit: &str) -> u64 {
    assert_eq!(
        r.status.as_u16(),
        status,
        "expected {status} {error} by {limit}, got {} headers {:?} body {:?}",
        r.status,
        r.headers,
        r.text()
    );
    let v = r.json();
    assert_eq!(v["error"], error, "error in {v}");
    assert_eq!(v["limit"], limit, "limit in {v}");
    let ra: u64 = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After on a rejection: {:?}", r.headers))
        .parse()
        .unwrap_or_else(|e| panic!("Retry-After is not whole seconds ({e}): {:?}", r.headers));
    assert_eq!(
        v["retry_after"].as_u64(),
        Some(ra),
        "body retry_after must equal Retry-After: {v}"
    );
    assert_eq!(
        r.header("cache-control"),
        Some("no-store"),
        "a rejection must carry Cache-Control: no-store"
    );
    let rid = r.header("x-request-id").expect("x-request-id");
    assert_eq!(v["request_id"], rid, "request_id must equal X-Request-Id");
    if let Some(f) = rl_opt(r, limit) {
        assert!(
            ra as i64 >= f.t,
            "Retry-After {ra} earlier than t of {limit}: {f:?}"
        );
    }
    ra
}

/// The wall clock since the Unix epoch.
pub fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
}

/// Sleeps until the wall clock is `offset` into a window of length `window`
/// aligned to the Unix epoch (the next such instant).
pub async fn align(window: Duration, offset: Duration) {
    let now = unix_now().as_micros();
    let w = window.as_micros();
    let into = now % w;
    let target = offset.as_micros();
    let wait = if into < target {
        target - into
    } else {
        w - into + target
    };
    tokio::time::sleep(Duration::from_micros(wait as u64)).await;
}

/// Sleeps until `offset` into the aligned window after the current one.
pub async fn next_window(window: Duration, offset: Duration) {
    let now = unix_now().as_micros();
    let w = window.as_micros();
    let target = (now / w + 1) * w + offset.as_micros();
    tokio::time::sleep(Duration::from_micros((target - now) as u64)).await;
}

/// If less than `need` is left in the current aligned `window`, sleeps until
/// 50 ms into the next one.
pub async fn ensure_room(window: Duration, need: Duration) {
    let now = unix_now().as_micros();
    let w = window.as_micros();
    let left = w - now % w;
    if left < need.as_micros() {
        tokio::time::sleep(Duration::from_micros(left as u64 + 50_000)).await;
    }
}

/// Sleeps until `start + at`.
pub async fn sleep_until(start: Instant, at: Duration) {
    tokio::time::sleep_until((start + at).into()).await;
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn pct(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An admin request with any method.
pub async fn admin(gw: &Gateway, method: Method, path: &str) -> Resp {
    let r = Request::builder()
        .method(method.clone())
        .uri(format!("http://{}{path}", gw.admin_addr()))
        .body(client::empty())
        .unwrap();
    client::try_send(&client::h1(), r)
        .await
        .unwrap_or_else(|e| panic!("admin {method} {path}: {e}"))
}

/// `GET /limits/{limit}/{key}` (both percent-encoded): 200 and its JSON.
pub async fn limit_state(gw: &Gateway, limit: &str, key: &str) -> Value {
    let path = format!("/limits/{}/{}", pct(limit), pct(key));
    let r = admin(gw, Method::GET, &path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    let v = r.json();
    assert_eq!(v["limit"], limit, "GET {path}: {v}");
    assert_eq!(v["key"], key, "GET {path}: {v}");
    v
}

/// `DELETE /limits/{limit}/{key}`: asserts 200 `{"reset": true}`.
pub async fn reset_limit(gw: &Gateway, limit: &str, key: &str) {
    let path = format!("/limits/{}/{}", pct(limit), pct(key));
    let r = admin(gw, Method::DELETE, &path).await;
    assert_eq!(r.status, 200, "DELETE {path}: {}", r.text());
    assert_eq!(r.json()["reset"], true, "DELETE {path}: {}", r.text());
}

/// `GET /lockouts` as JSON (asserted 200).
pub async fn lockouts(gw: &Gateway) -> Value {
    let r = admin(gw, Method::GET, "/lockouts").await;
    assert_eq!(r.status, 200, "GET /lockouts: {}", r.text());
    r.json()
}

/// The `limit` field of every access-log line of `route`, in order.
pub fn decisions(gw: &Gateway, route: &str) -> Vec<String> {
    gw.access_logs()
        .iter()
        .filter(|v| v["route"] == route)
        .map(|v| v["limit"].as_str().unwrap_or("<missing>").to_string())
        .collect()
}

/// Waits (up to 5 s) until `route` has `n` access-log lines, then returns
/// how many of each decision there were.
pub async fn decision_counts(gw: &Gateway, route: &str, n: usize) -> BTreeMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let d = decisions(gw, route);
        if d.len() >= n || Instant::now() > deadline {
            let mut m = BTreeMap::new();
            for x in d {
                *m.entry(x).or_insert(0) += 1;
            }
            return m;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A map from `[(k, n)]`, for comparing with [`decision_counts`].
pub fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// How many responses had each status.
pub fn tally(statuses: impl IntoIterator<Item = u16>) -> BTreeMap<u16, usize> {
    let mut m = BTreeMap::new();
    for s in statuses {
        *m.entry(s).or_insert(0) += 1;
    }
    m
}

/// The value of the first Prometheus sample of `name` whose labels include
/// every `label="value"` given (in any order); `None` if there is none.
pub async fn metric_with(gw: &Gateway, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = gw.admin_get("/metrics").await.text();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse().ok()))
}

/// After a reset made through another instance: `caller`'s GETs of `path`
/// (with `headers`) pass within a second; until then each is answered
/// `locked_out` by `limit` (the instance's deny cache, not yet cleared).
pub async fn unlocked_within_a_second(
    caller: &Caller,
    path: &str,
    headers: &[(&str, &str)],
    limit: &str,
) {
    let t0 = Instant::now();
    loop {
        let r = caller.get_h(path, headers).await;
        if r.status == 200 {
            return;
        }
        assert_rejected(&r, "locked_out", limit);
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "still locked_out 1 s after the reset on another instance"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `n` GETs of `path` sent at once, spread round robin over `callers`:
/// their answers, in order. A request with no answer fails the test.
pub async fn spread(callers: &[Caller], path: &'static str, n: usize) -> Vec<Resp> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let c = callers[i % callers.len()].clone();
            tokio::spawn(async move { c.try_get_h(path, &[]).await })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for h in handles {
        out.push(
            h.await
                .unwrap()
                .unwrap_or_else(|e| panic!("request failed: {e}")),
        );
    }
    out
}

/// Three gateways on one shared `store` (a flow map), whose one route (to
/// an echo upstream `e`) has the one limit `x: <limit>`: 300 requests of
/// `path` at once over the three admit exactly 100, the others are rejected
/// by `x`, and only the admitted reach the upstream.
pub async fn exactly_100_of_300(store: &str, limit: &str, path: &'static str) {
    let echo = super::Echo::start("e").await;
    let t = OneRoute::new()
        .store(store)
        .upstream(&echo)
        .upstream_keys("retries: 0")
        .limit("x", limit)
        .config();
    let gateways = [
        Gateway::start(&t).await,
        Gateway::start(&t).await,
        Gateway::start(&t).await,
    ];
    let what = limit;
    let callers: Vec<Caller> = gateways.iter().map(|g| Caller::new(g.addr())).collect();
    let mut statuses = Vec::new();
    for r in spread(&callers, path, 300).await {
        if r.status != 200 {
            assert_rejected(&r, "rate_limited", "x");
        }
        statuses.push(r.status.as_u16());
    }
    assert_eq!(
        tally(statuses),
        [(200, 100), (429, 200)].into_iter().collect(),
        "{what}: exactly 100 of 300 admitted over {} instances",
        gateways.len()
    );
    assert_eq!(
        echo.count(),
        100,
        "rejected requests never reach the upstream"
    );
}

/// `POST /probe` with `body` (and, if given, the admin `token`).
pub async fn probe_with(gw: &Gateway, body: &str, token: Option<&str>) -> Resp {
    let mut b = client::req(Method::POST, gw.admin_addr(), "/probe")
        .header("content-type", "application/json");
    if let Some(token) = token {
        b = b.header("authorization", format!("Bearer {token}"));
    }
    client::try_send(
        &client::h1(),
        b.body(client::full(body.to_owned())).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("POST /probe {body}: {e}"))
}

/// `POST /probe` with `body`: 200 and its JSON.
pub async fn probe(gw: &Gateway, body: &str) -> Value {
    let r = probe_with(gw, body, None).await;
    assert_eq!(r.status, 200, "POST /probe {body}: {}", r.text());
    r.json()
}
