//! Differential test: the running gateway and `tollgate simulate` must make the
//! same decision for every request of generated sequences (docs/protocols.md,
//! docs/configuration/limits.md §9).
//!
//! A seeded generator writes 500 requests per seed: odd path spellings
//! (`//`, `/./`, `/a/../b`, `%2e%2e`, encoded unreserved characters, `%2F`
//! kept encoded, `..` above the root), query keys present, absent and
//! encoded, `x-user` / exemption / override headers, cookies, several
//! methods and hosts, HTTP/1.0 without Host, peers from several loopback
//! addresses (one a trusted proxy, one in `server.deny`) with and without
//! `X-Forwarded-For`, and consumers (docs/configuration/consumers.md): API
//! keys in the header or the query, HS256 tokens good and bad, both at
//! once, plans a route does not let through, limits keyed on the consumer,
//! tenant and a claim, and `failure_limit` with a lockout; and cost
//! limits (docs/configuration/cost.md) charging the number in a request
//! header, missing or malformed in some (400 `invalid_cost` where the
//! limit applies). Each request is written byte for byte on its own
//! connection from its peer address, one at a time, and the gateway's answer
//! is recorded (status, the JSON `error` and `limit`, whether the echo
//! upstream answered, and the route from the access log). The same requests,
//! with the times they were sent, form the log that `tollgate simulate
//! --decisions` replays over the same config; the two must agree on every
//! request: route, forwarded or not, the status the gateway answers itself,
//! `error` and `limit`. (A HEAD answer has no body: its `error` comes from
//! the access log's decision or its status, and its `limit` is not known.)
//! The test also requires the mix to hold enough of every kind of decision.
//!
//! Every limit's outcome is independent of the few seconds the test takes:
//! token buckets and GCRA refill one unit in hundreds of days, sliding logs
//! span days, lockouts last hours, and the concurrency limit is never
//! reached by sequential requests. The refill periods differ by days from
//! limit to limit, so "the limit with the longest wait" (the one a
//! rejection names) never depends on milliseconds either.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use common::gateway::{temp_dir, Gateway, BIN};
use common::upstream::Echo;

/// The generator's seeds, one run on a fresh gateway each: the same
/// requests on every run of the test.
const SEEDS: [u64; 3] = [
    0x7011_6a7e_5eed_2024,
    0x9e37_79b9_7f4a_7c15,
    0x0123_4567_89ab_cdef,
];

/// How many requests are generated per seed.
const REQUESTS: usize = 500;

/// The loopback peer inside `trusted_proxies`.
const TRUSTED_PEER: u8 = 2;

/// The loopback peer inside `server.deny`.
const DENIED_PEER: u8 = 9;

/// How many differing requests a failure shows.
const SHOWN: usize = 10;

/// The `server:` keys besides `listen`.
const SERVER: &str = r#"
trusted_proxies: ["127.0.0.2/32", "10.0.0.0/8"]
deny: ["127.0.0.9/32", "203.0.113.0/24"]
escaped_slashes: keep
"#;

/// Upstreams, limits and routes; `@ECHO@` is the echo upstream's address.
const REST: &str = r#"
upstreams:
  echo:
    targets: ["http://@ECHO@"]
limits:
  per_ip:
    algorithm: token_bucket
    rate: 1/1000d
    burst: 8
    key: client_ip
    exempt: ["198.51.100.0/24", "header:x-internal=yes"]
    overrides:
      - { match: "192.0.2.0/24", burst: 30 }
      - { match: "header:x-tier=gold", burst: 14 }
  heavy:
    algorithm: token_bucket
    rate: 1/700d
    burst: 10
    cost: 3
    key: client_ip
  login:
    algorithm: sliding_log
    limit: 2
    window: 3d
    key: [client_ip, "header:x-user"]
    on_missing_key: deny
    lockout: { after: 1, duration: 5h, escalate: 2, max_duration: 2d }
  login_ip:
    algorithm: gcra
    rate: 1/150d
    burst: 5
    key: client_ip
    lockout: { after: 2, duration: 1h }
  session:
    algorithm: token_bucket
    rate: 1/300d
    burst: 4
    key: "cookie:sid"
  v2_users:
    algorithm: gcra
    rate: 1/130d
    burst: 3
    key: "header:x-user"
    on_missing_key: skip
    exempt: ["header:x-internal=yes"]
    overrides: [{ match: "header:x-tier=gold", burst: 6 }]
  search_q:
    algorithm: gcra
    rate: 1/110d
    burst: 3
    key: "query:q"
    on_missing_key: skip
  shadow_ip:
    algorithm: sliding_log
    limit: 2
    window: 4d
    key: client_ip
    mode: shadow
  inflight:
    algorithm: concurrency
    limit: 2
    key: client_ip
  auth_fail:
    algorithm: sliding_log
    limit: 6
    window: 6d
    key: client_ip
    lockout: { after: 2, duration: 7h }
  per_consumer:
    algorithm: token_bucket
    rate: 1/900d
    burst: 4
    key: consumer
    exempt: ["consumer=root"]
    overrides: [{ match: "plan=gold", burst: 7 }]
  per_tenant:
    algorithm: sliding_log
    limit: 5
    window: 5d
    key: [tenant, "claim:region"]
    on_missing_key: skip
  tokens:
    algorithm: token_bucket
    rate: 1/500d
    burst: 20
    key: client_ip
    exempt: ["header:x-internal=yes"]
    cost: { reserve: "header:x-cost", settle: none }
  tokens_user:
    algorithm: gcra
    rate: 1/60d
    burst: 12
    key: "header:x-user"
    on_missing_key: skip
    cost: { reserve: "header:x-cost", settle: none }
  tokens_requests:
    algorithm: sliding_log
    limit: 9
    window: 6d
    key: client_ip
routes:
  - name: tokens
    match: { path: /tokens, methods: [GET, POST] }
    upstream: echo
    limits: [tokens_requests, tokens, tokens_user]
  - name: account
    match: { path: /account }
    upstream: echo
    auth: { plans: [gold, silver] }
    limits: [per_consumer, per_tenant]
  - name: partner
    match: { path: /partner }
    respond: { status: 200, body: "partner\n" }
    auth: { require: [jwt], tenants: [acme] }
  - name: admin
    match: { hosts: ["admin.example.com"], path: / }
    respond: { status: 202, body: "admin\n" }
    limits: [{ algorithm: sliding_log, limit: 4, window: 5d, key: route }]
  - name: health
    match: { exact: /healthz }
    respond: { status: 200, body: "ok\n" }
  - name: login
    match: { exact: /login, methods: [POST, GET] }
    respond: { status: 200, body: "welcome\n" }
    limits: [login, login_ip]
  - name: items
    match: { regex: "^/v[0-9]+/items(/[0-9]+)?$", methods: [GET, HEAD] }
    upstream: echo
    limits: [per_ip, heavy]
    limit_response: { status: 503 }
  - name: api-v2
    match: { path: /api, headers: { x-version: "2" } }
    upstream: echo
    limits: [v2_users, per_ip]
  - name: api
    match: { path: /api, methods: [GET, HEAD, POST] }
    upstream: echo
    strip_prefix: true
    limits: [per_ip, session]
  - name: search
    match: { path: /search }
    upstream: echo
    limits: [search_q, shadow_ip, inflight]
  - name: static
    match: { hosts: ["*.example.com"], path: /static }
    respond: { status: 200, body: "static\n", headers: { content-type: text/plain } }
    limits:
      - { algorithm: token_bucket, rate: 1/800d, burst: 3, key: [client_ip, "header:x-user"] }
consumers:
  api_keys: { header: x-api-key, query: api_key }
  jwt:
    issuers:
      - issuer: "https://hs.example/"
        audiences: [api]
        secret: "@SECRET@"
        tenant: org
        plan: plan
  identity_headers: { consumer: x-consumer, tenant: x-tenant }
  failure_limit: auth_fail
  list:
    - { name: acme, tenant: acme, plan: gold, keys: ["@ACME@"] }
    - { name: beta, tenant: beta, plan: silver, keys: ["@BETA@"] }
    - { name: cara, plan: bronze, keys: ["@CARA@"] }
    - { name: root, tenant: acme, plan: gold, keys: ["@ROOT@"] }
"#;

/// The JWT issuer's secret.
const SECRET: &str = "differential-hs256-secret-of-32-bytes+";

/// The API keys of the consumers acme (gold), beta (silver), cara (bronze,
/// a plan no route lets through) and root (exempt from `per_consumer`).
const KEYS: [(&str, &str); 4] = [
    ("@ACME@", "acme-key-0001"),
    ("@BETA@", "beta-key-0002"),
    ("@CARA@", "cara-key-0003"),
    ("@ROOT@", "root-key-0004"),
];

/// The config template (`@LISTEN@`, `@ADMIN@` left for [`Gateway`]).
fn config_template(echo: SocketAddr) -> String {
    let mut rest = REST
        .replace("@ECHO@", &echo.to_string())
        .replace("@SECRET@", SECRET);
    for (placeholder, key) in KEYS {
        let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
        rest = rest.replace(placeholder, &format!("sha256:{digest}"));
    }
    common::config_with_server(SERVER, &rest)
}

/// `127.0.0.n`.
fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

// ---------------------------------------------------------------------------
// The generator

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    /// The next 64 random bits.
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items`, uniformly.
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }

    /// One of `items`, each as likely as its weight.
    fn weighted<T: Copy>(&mut self, items: &[(u64, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut at = self.next() % total;
        for &(w, item) in items {
            if at < w {
                return item;
            }
            at -= w;
        }
        items[items.len() - 1].1
    }
}

/// One generated request.
#[derive(Debug, Clone)]
struct Req {
    /// The last octet of the loopback peer it is sent from.
    peer: u8,
    method: &'static str,
    /// The request-target, exactly as written on the wire.
    target: String,
    /// The Host; `None`: sent as HTTP/1.0 without one.
    host: Option<String>,
    /// Header fields besides Host, in order (names lowercase).
    headers: Vec<(&'static str, String)>,
}

impl Req {
    /// The request's bytes: HTTP/1.1 with Host and `Connection: close`, or
    /// HTTP/1.0 without Host.
    fn wire(&self) -> Vec<u8> {
        let mut s = String::new();
        let version = if self.host.is_some() { "1.1" } else { "1.0" };
        let _ = write!(s, "{} {} HTTP/{version}\r\n", self.method, self.target);
        if let Some(host) = &self.host {
            let _ = write!(s, "host: {host}\r\nconnection: close\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(s, "{name}: {value}\r\n");
        }
        s.push_str("\r\n");
        s.into_bytes()
    }

    /// The request as a `tollgate simulate` log line, sent at `ts`. The
    /// headers object is written by hand so that a repeated name stays two
    /// fields, as on the wire; values without the whitespace around them,
    /// which is not part of a field value (RFC 9110 §5.5).
    fn log_line(&self, ts: f64) -> String {
        let q = |s: &str| Value::from(s).to_string();
        let mut line = format!(
            "{{\"ts\": {ts:.6}, \"client\": {}, \"method\": {}, \"path\": {}",
            q(&lo(self.peer).to_string()),
            q(self.method),
            q(&self.target)
        );
        if let Some(host) = &self.host {
            let _ = write!(line, ", \"host\": {}", q(host));
        }
        let fields: Vec<String> = self
            .headers
            .iter()
            .map(|(n, v)| format!("{}: {}", q(n), q(v.trim())))
            .collect();
        let _ = write!(line, ", \"headers\": {{{}}}}}", fields.join(", "));
        line
    }

    /// The first value of a header.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `per_ip` exempts it: the exemption header, or a trusted
    /// peer naming an address of `198.51.100.0/24` alone in XFF.
    fn exempt(&self) -> bool {
        self.header("x-internal") == Some("yes")
            || (self.peer == TRUSTED_PEER && self.header("x-forwarded-for") == Some("198.51.100.7"))
    }

    /// One line for failure messages.
    fn describe(&self) -> String {
        let host = self
            .host
            .as_deref()
            .map_or("(HTTP/1.0, no Host)".into(), |h| format!("Host: {h}"));
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        format!(
            "from {} {} {} {host} [{}]",
            lo(self.peer),
            self.method,
            self.target,
            headers.join("; ")
        )
    }
}

/// `X-Forwarded-For` values: plain clients, an override CIDR, an exempt
/// CIDR, a denied one, chains through trusted proxies, garbage, a port.
const XFF: &[&str] = &[
    "192.0.2.10",
    "198.51.100.7",
    "203.0.113.5",
    "172.16.0.5",
    "10.9.9.9, 172.16.0.5",
    "172.16.0.6, 10.0.0.1",
    "unknown",
    "192.0.2.10:4711",
    "127.0.0.9",
    " 172.16.0.5 ,",
];

/// Hosts for routes that match any host.
const HOSTS: &[&str] = &[
    "api.example.com",
    "API.Example.COM:8080",
    "localhost",
    "10.0.0.1:80",
];

/// Spellings of `/login` (some of which are other paths).
const LOGIN_PATHS: &[&str] = &[
    "/login",
    "//login",
    "/./login",
    "/x/../login",
    "/%6Cogin",
    "/%6c%6f%67%69%6e",
    "/login/",
    "/Login",
    "/login?next=/home",
    "/a/b/../../login",
];

/// Spellings of the items paths (some of which match no route).
const ITEM_PATHS: &[&str] = &[
    "/v1/items",
    "/v2/items/42",
    "/v1/./items",
    "/v1/items/%34%32",
    "/v1//items/7",
    "/v10/items",
    "/v1/items/x",
    "/v1/items/../items/3",
    "/V1/items",
    "/v1/items/%2e%2e/items/5",
];

/// `/api` paths, odd and plain, and near misses.
const API_PATHS: &[&str] = &[
    "/api",
    "/api/",
    "/api/users",
    "/api/users/7",
    "//api//users",
    "/api/%2Fetc",
    "/api/a%2fb",
    "/api/./x/../users",
    "/api/%7Euser",
    "/api/a{b}",
    "/apix",
    "/api/../secret",
    "/api/a\\b",
    "/%61pi/users",
    "/api/users?page=2",
];

/// `/search` query strings: the key present, encoded, empty, repeated,
/// absent, its name encoded or in another case.
const SEARCH_QUERIES: &[&str] = &[
    "",
    "?q=rust",
    "?q=r%75st",
    "?q=a+b",
    "?q=",
    "?Q=rust",
    "?x=1&q=go",
    "?q=go&q=rust",
    "?q=%zz",
    "?%71=rust",
];

/// Targets that no route takes, or that are not valid at all.
const JUNK_TARGETS: &[&str] = &[
    "/../etc/passwd",
    "/%2e%2e/x",
    "/a/%2e%2e/%2e%2e/b",
    "/nowhere",
    "/api/%zz",
    "/api/%00",
    "http://api.example.com/api",
    "*",
    "/a/../../b",
    "/favicon.ico",
    "/healthz",
    "/%68ealthz",
];

/// Cookie header values for the `session` limit (`cookie:sid`).
const COOKIES: &[&str] = &[
    "sid=abc",
    "theme=dark; sid=xyz",
    "sid=",
    "theme=dark",
    "sid=\"q\"",
];

/// The request generator.
struct Gen {
    rng: Rng,
}

impl Gen {
    /// The next request.
    fn request(&mut self) -> Req {
        let family: fn(&mut Gen) -> Req = self.rng.weighted(&[
            (14, Gen::login as fn(&mut Gen) -> Req),
            (16, Gen::items),
            (22, Gen::api),
            (12, Gen::search),
            (8, Gen::hosted),
            (10, Gen::junk),
            (20, Gen::account),
            (12, Gen::tokens),
        ]);
        let mut req = family(self);
        self.client(&mut req);
        req
    }

    /// A request with the basics filled in: a host (or none, now and then).
    fn base(&mut self, method: &'static str, target: String) -> Req {
        let host = if self.rng.chance(7) {
            None
        } else {
            Some(self.rng.pick(HOSTS).to_owned())
        };
        Req {
            peer: 1,
            method,
            target,
            host,
            headers: Vec::new(),
        }
    }

    /// The peer, maybe `X-Forwarded-For` (once in a while twice), and now
    /// and then an API key on a route that may not ask for one.
    fn client(&mut self, req: &mut Req) {
        if !req.target.starts_with("/account") && self.rng.chance(6) {
            let key = self.rng.pick(&[KEYS[0].1, KEYS[2].1, "nope", "guess-2"]);
            req.headers.push(("x-api-key", key.to_owned()));
        }
        req.peer = self
            .rng
            .weighted(&[(30, 1), (35, TRUSTED_PEER), (25, 3), (10, DENIED_PEER)]);
        if self.rng.chance(55) {
            let xff = self.rng.pick(XFF);
            req.headers.push(("x-forwarded-for", xff.to_owned()));
            if self.rng.chance(8) {
                let second = self.rng.pick(XFF);
                req.headers.push(("x-forwarded-for", second.to_owned()));
            }
        }
    }

    /// Maybe a header from `values` (an empty list entry: none).
    fn maybe_header(&mut self, req: &mut Req, name: &'static str, values: &[&str]) {
        let value = self.rng.pick(values);
        if !value.is_empty() {
            req.headers.push((name, value.to_owned()));
        }
    }

    /// `/login`: two limits with lockouts, a composite key with
    /// `on_missing_key: deny`.
    fn login(&mut self) -> Req {
        let method = self.rng.weighted(&[
            (70, "POST"),
            (15, "GET"),
            (5, "DELETE"),
            (5, "HEAD"),
            (5, "OPTIONS"),
        ]);
        let target = self.rng.pick(LOGIN_PATHS).to_owned();
        let mut req = self.base(method, target);
        let user = self.rng.weighted(&[
            (30, "alice"),
            (25, "bob"),
            (15, "carol"),
            (10, "-"),
            (20, ""),
        ]);
        match user {
            "" => {}
            "-" => req.headers.push(("x-user", String::new())),
            user => req.headers.push(("x-user", user.to_owned())),
        }
        req
    }

    /// The items regex route: a shared limit and a `cost: 3` one, a custom
    /// rejection status.
    fn items(&mut self) -> Req {
        let method = self.rng.weighted(&[
            (60, "GET"),
            (20, "HEAD"),
            (10, "POST"),
            (5, "DELETE"),
            (5, "TRACE"),
        ]);
        let target = self.rng.pick(ITEM_PATHS).to_owned();
        let mut req = self.base(method, target);
        self.maybe_header(
            &mut req,
            "x-tier",
            &["gold", "", "", "", "", "", "", "silver"],
        );
        self.maybe_header(
            &mut req,
            "x-internal",
            &["yes", "", "", "", "", "", "", "", "no"],
        );
        req
    }

    /// `/api` and `/api` with `x-version: 2`: the shared limit with its
    /// exemptions and overrides, a cookie key, a header key with `skip`.
    fn api(&mut self) -> Req {
        let method = self.rng.weighted(&[
            (50, "GET"),
            (25, "POST"),
            (10, "HEAD"),
            (5, "DELETE"),
            (5, "OPTIONS"),
            (5, "TRACE"),
        ]);
        let target = self.rng.pick(API_PATHS).to_owned();
        let mut req = self.base(method, target);
        if self.rng.chance(30) {
            req.headers.push(("x-version", "2".to_owned()));
        }
        self.maybe_header(&mut req, "x-user", &["dave", "erin", "", ""]);
        self.maybe_header(&mut req, "x-tier", &["gold", "", "", "", "", ""]);
        self.maybe_header(
            &mut req,
            "x-internal",
            &["yes", "", "", "", "", "", "", "", "", "no"],
        );
        if self.rng.chance(70) {
            let cookie = self.rng.pick(COOKIES);
            req.headers.push(("cookie", cookie.to_owned()));
            if self.rng.chance(10) {
                req.headers.push(("cookie", "sid=second".to_owned()));
            }
        }
        req
    }

    /// `/search`: a query key with `skip`, a shadow limit, a concurrency
    /// limit.
    fn search(&mut self) -> Req {
        let method = self
            .rng
            .weighted(&[(75, "GET"), (15, "HEAD"), (10, "POST")]);
        let path = self.rng.weighted(&[
            (80, "/search"),
            (8, "/search/more"),
            (6, "//search"),
            (6, "/search/"),
        ]);
        let query = self.rng.pick(SEARCH_QUERIES);
        self.base(method, format!("{path}{query}"))
    }

    /// `/tokens`: two cost limits charging the number in `x-cost` (one
    /// with an exemption, one keyed on a header that may be missing),
    /// beside a request limit; the header missing or not a whole number
    /// (400 `invalid_cost` where a cost limit applies), estimates above a
    /// limit's capacity. Never HEAD: a refusal's `error` is in the body.
    fn tokens(&mut self) -> Req {
        let method = self.rng.weighted(&[(60, "POST"), (40, "GET")]);
        let path = self
            .rng
            .weighted(&[(85, "/tokens"), (10, "//tokens"), (5, "/tokens/x")]);
        let mut req = self.base(method, path.to_owned());
        self.maybe_header(
            &mut req,
            "x-cost",
            &[
                "1", "3", "6", "10", "4", "", "0", " 5 ", "x", "25", "-1", "7",
            ],
        );
        self.maybe_header(&mut req, "x-user", &["gina", "hal", "", ""]);
        self.maybe_header(&mut req, "x-internal", &["yes", "", "", "", ""]);
        req
    }

    /// Routes chosen by Host: `admin.example.com` (a `route` key) and
    /// `*.example.com` (a composite key with a header that may be missing).
    fn hosted(&mut self) -> Req {
        let method = self.rng.weighted(&[(80, "GET"), (20, "HEAD")]);
        let (host, target) = if self.rng.chance(35) {
            (
                "admin.example.com",
                self.rng.pick(&["/", "/anything", "/./x"]),
            )
        } else {
            let host = self.rng.pick(&[
                "cdn.example.com",
                "CDN.EXAMPLE.COM",
                "img.example.com:8443",
                "example.com",
                "x.example.org",
            ]);
            let target = self.rng.pick(&[
                "/static/app.js",
                "/static",
                "/static/../static/x.css",
                "/staticx",
            ]);
            (host, target)
        };
        let mut req = self.base(method, target.to_owned());
        req.host = Some(host.to_owned());
        self.maybe_header(&mut req, "x-user", &["frank", ""]);
        req
    }

    /// `/account` (any verified consumer of plan gold or silver, limits
    /// keyed on the consumer and the tenant) and `/partner` (a JWT of
    /// tenant acme): API keys in the header or the query, good and bad
    /// tokens, both at once, none. Never HEAD: a refusal's `error` is in
    /// the body.
    fn account(&mut self) -> Req {
        let method = self.rng.weighted(&[(75, "GET"), (25, "POST")]);
        let path = self
            .rng
            .weighted(&[(80, "/account"), (10, "/account/x"), (10, "/partner")]);
        let mut req = self.base(method, path.to_owned());
        req.host.get_or_insert_with(|| "api.example.com".to_owned());
        let (key, token) = self.credentials();
        match key {
            Some(key) if self.rng.chance(20) => req.target.push_str(&format!("?api_key={key}")),
            Some(key) => req.headers.push(("x-api-key", key.to_owned())),
            None => {}
        }
        if let Some(token) = token {
            req.headers
                .push(("authorization", format!("Bearer {token}")));
        }
        req
    }

    /// An API key and a bearer token, either or both or neither.
    fn credentials(&mut self) -> (Option<&'static str>, Option<String>) {
        let key = self.rng.weighted(&[
            (30, None),
            (18, Some(KEYS[0].1)),
            (10, Some(KEYS[1].1)),
            (6, Some(KEYS[2].1)),
            (6, Some(KEYS[3].1)),
            (14, Some("acme-key-0000")),
            (6, Some("")),
        ]);
        let with_token = match key {
            None => self.rng.chance(75),
            Some(_) => self.rng.chance(12),
        };
        let token = with_token.then(|| self.token());
        (key.filter(|k| !k.is_empty()), token)
    }

    /// A token: good ones (consumer, tenant, plan, region from claims),
    /// and expired, for another audience, from another issuer, badly
    /// signed, `alg: none`.
    fn token(&mut self) -> String {
        let sub = self.rng.pick(&["acme", "beta", "dana"]);
        let org = self.rng.pick(&["acme", "beta", "zeta"]);
        let plan = self.rng.pick(&["gold", "silver", "bronze"]);
        let mut claims = serde_json::json!({
            "iss": "https://hs.example/", "aud": "api", "sub": sub,
            "org": org, "plan": plan, "exp": 4_102_444_800u64,
        });
        if self.rng.chance(50) {
            claims["region"] = serde_json::json!(self.rng.pick(&["eu", "us"]));
        }
        let flaw = self.rng.weighted(&[
            (60, "none"),
            (8, "expired"),
            (8, "audience"),
            (6, "issuer"),
            (10, "signature"),
            (8, "alg none"),
        ]);
        let secret = if flaw == "signature" { "wrong" } else { SECRET };
        match flaw {
            "expired" => claims["exp"] = serde_json::json!(1_000_000_000u64),
            "audience" => claims["aud"] = serde_json::json!("other"),
            "issuer" => claims["iss"] = serde_json::json!("https://evil.example/"),
            _ => {}
        }
        if flaw == "alg none" {
            let header = serde_json::json!({"alg": "none"});
            return common::jwt::token_with(&header, &claims, |_| Vec::new());
        }
        common::jwt::hmac_token(secret.as_bytes(), "HS256", &claims)
    }

    /// Targets no route takes, invalid ones, TRACE, `OPTIONS *`, bad Hosts.
    fn junk(&mut self) -> Req {
        let method =
            self.rng
                .weighted(&[(60, "GET"), (15, "TRACE"), (15, "OPTIONS"), (10, "DELETE")]);
        let target = self.rng.pick(JUNK_TARGETS).to_owned();
        let mut req = self.base(method, target);
        if self.rng.chance(10) {
            req.host = Some(self.rng.pick(&["a@b", "h:port", "x y"]).to_owned());
        }
        req
    }
}

/// `n` requests from the generator seeded with `seed`.
fn generate(seed: u64, n: usize) -> Vec<Req> {
    let mut gen = Gen { rng: Rng(seed) };
    (0..n).map(|_| gen.request()).collect()
}

// ---------------------------------------------------------------------------
// The gateway side

/// A raw HTTP/1 response.
#[derive(Debug)]
struct RawAnswer {
    status: u16,
    /// Lowercase names.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawAnswer {
    /// The first value of a header.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes `bytes` on a new connection from `peer` to `addr` and reads the
/// response until the gateway closes the connection (every request says
/// `Connection: close` or is HTTP/1.0).
async fn exchange(addr: SocketAddr, peer: IpAddr, bytes: &[u8]) -> Result<RawAnswer, String> {
    let io = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(peer, 0))?;
        let mut stream = socket.connect(addr).await?;
        stream.set_nodelay(true)?;
        stream.write_all(bytes).await?;
        let mut buf = Vec::new();
        // A reset after the answer (the gateway closing with our bytes
        // unread) still leaves the answer in `buf`.
        let _ = stream.read_to_end(&mut buf).await;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| "no answer within 10 s".to_owned())?
        .map_err(|e| format!("I/O: {e}"))?;
    parse_response(&buf)
}

/// Parses one HTTP/1 response read to the end of the connection.
fn parse_response(buf: &[u8]) -> Result<RawAnswer, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no response head in {:?}", text(buf)))?;
    let head = text(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &buf[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(RawAnswer {
        status,
        headers,
        body,
    })
}

/// The data of a chunked body (trailers ignored).
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// What the gateway did with one request.
#[derive(Debug, Clone)]
struct Observed {
    status: u16,
    /// The echo upstream answered (its `x-upstream` header came back).
    upstream: bool,
    request_id: String,
    /// The body was readable (not a HEAD request).
    has_body: bool,
    /// `error` and `limit` of a gateway JSON error body.
    error: Option<String>,
    limit: Option<String>,
    /// From the access log: the route, and the limit decision.
    route: Option<String>,
    decision: String,
}

impl Observed {
    /// Reads the answer to a request (`head`: it was a HEAD, so no body).
    fn from_answer(answer: &RawAnswer, head: bool) -> Observed {
        let json: Option<Value> = serde_json::from_slice(&answer.body).ok();
        let field = |name: &str| {
            json.as_ref()
                .filter(|v| v.get("request_id").is_some())
                .and_then(|v| v[name].as_str())
                .map(str::to_owned)
        };
        Observed {
            status: answer.status,
            upstream: answer.header("x-upstream").is_some(),
            request_id: answer.header("x-request-id").unwrap_or_default().to_owned(),
            has_body: !head,
            error: field("error"),
            limit: field("limit"),
            route: None,
            decision: String::new(),
        }
    }

    /// The `error` of an answer to a HEAD request, which has no body: from
    /// the access log's decision, else from the status of an answer given
    /// before any route was found.
    fn error_without_body(&self) -> Option<String> {
        if self.upstream {
            return None;
        }
        match self.decision.as_str() {
            "rejected" => return Some("rate_limited".into()),
            "locked_out" => return Some("locked_out".into()),
            _ => {}
        }
        if self.route.is_some() {
            return None;
        }
        let code = match self.status {
            400 => "bad_request",
            403 => "forbidden",
            404 => "no_route",
            405 => "method_not_allowed",
            other => return Some(format!("status {other}")),
        };
        Some(code.to_owned())
    }

    /// The decision in simulate's terms. `limit` is `None` when unknown
    /// (HEAD).
    fn decision(&self) -> Decision {
        Decision {
            route: self.route.clone(),
            upstream: self.upstream,
            status: (!self.upstream).then_some(self.status),
            error: if self.has_body {
                self.error.clone()
            } else {
                self.error_without_body()
            },
            limit: self.limit.clone(),
        }
    }
}

/// Sends every request through the gateway, one at a time; returns what it
/// answered and the simulate log (each line stamped with its sending time).
async fn through_gateway(gw: &Gateway, reqs: &[Req]) -> (Vec<Observed>, String) {
    let addr = gw.addr();
    let mut observed = Vec::with_capacity(reqs.len());
    let mut log = String::new();
    for (i, req) in reqs.iter().enumerate() {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        log.push_str(&req.log_line(ts));
        log.push('\n');
        let answer = exchange(addr, lo(req.peer), &req.wire())
            .await
            .unwrap_or_else(|e| panic!("request {} ({}): {e}", i + 1, req.describe()));
        observed.push(Observed::from_answer(&answer, req.method == "HEAD"));
    }
    (observed, log)
}

/// Fills in each request's route and decision from the access log (waiting
/// for every line to be written).
async fn add_access_log(gw: &Gateway, observed: &mut [Observed]) {
    let wanted = observed.len();
    let by_id: HashMap<String, Value> = common::eventually(
        Duration::from_secs(5),
        "an access-log line for every request",
        || async {
            let lines = gw.access_logs();
            let by_id: HashMap<String, Value> = lines
                .into_iter()
                .filter_map(|v| Some((v["request_id"].as_str()?.to_owned(), v)))
                .collect();
            (by_id.len() >= wanted).then_some(by_id)
        },
    )
    .await;
    for o in observed {
        let line = by_id
            .get(&o.request_id)
            .unwrap_or_else(|| panic!("no access-log line for request id {:?}", o.request_id));
        o.route = line["route"]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        o.decision = line["limit"].as_str().unwrap_or_default().to_owned();
    }
}

// ---------------------------------------------------------------------------
// The simulate side, and the comparison

/// One request's decision, in the terms of `simulate --decisions`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    route: Option<String>,
    upstream: bool,
    /// The status the gateway answers itself (`None`: forwarded).
    status: Option<u16>,
    error: Option<String>,
    limit: Option<String>,
}

impl Decision {
    /// One line of `simulate --decisions`.
    fn from_json(v: &Value) -> Decision {
        let text = |name: &str| v[name].as_str().map(str::to_owned);
        Decision {
            route: text("route"),
            upstream: v["upstream"].as_bool().expect("`upstream` is a boolean"),
            status: v["status"].as_u64().map(|s| s as u16),
            error: text("error"),
            limit: text("limit"),
        }
    }

    /// Whether the gateway's decision `gw` agrees with this one. The limit
    /// is compared when the gateway's answer had a body to name it.
    fn agrees(&self, gw: &Decision, limit_known: bool) -> bool {
        self.route == gw.route
            && self.upstream == gw.upstream
            && self.status == gw.status
            && self.error == gw.error
            && (!limit_known || self.limit == gw.limit)
    }

    /// A compact form for failure messages.
    fn show(&self) -> String {
        let route = self.route.as_deref().unwrap_or("-");
        if self.upstream {
            return format!("route {route}: forwarded");
        }
        format!(
            "route {route}: status {} error {} limit {}",
            self.status.map_or("-".into(), |s| s.to_string()),
            self.error.as_deref().unwrap_or("-"),
            self.limit.as_deref().unwrap_or("-")
        )
    }
}

/// Runs `tollgate simulate --decisions -c config log` and parses its lines.
fn simulate(config: &Path, log: &Path) -> Vec<Decision> {
    let out = Command::new(BIN)
        .args(["simulate", "--decisions", "-c"])
        .arg(config)
        .arg(log)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .expect("run tollgate simulate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate failed: {stderr}");
    assert!(stderr.trim().is_empty(), "simulate complained: {stderr}");
    String::from_utf8(out.stdout)
        .expect("UTF-8 output")
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("simulate line {}: {e}: {line}", i + 1));
            assert_eq!(v["line"], i as u64 + 1, "simulate answers in order: {line}");
            Decision::from_json(&v)
        })
        .collect()
}

/// The requests on which the two sides disagree, described (at most
/// [`SHOWN`] of them, and how many in all).
fn differences(reqs: &[Req], observed: &[Observed], simulated: &[Decision]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, ((req, o), sim)) in reqs.iter().zip(observed).zip(simulated).enumerate() {
        let gw = o.decision();
        if sim.agrees(&gw, o.has_body) {
            continue;
        }
        found.push(format!(
            "request {}: {}\n    gateway:  {} (access-log decision {:?})\n    simulate: {}",
            i + 1,
            req.describe(),
            gw.show(),
            o.decision,
            sim.show()
        ));
    }
    let total = found.len();
    found.truncate(SHOWN);
    if total > SHOWN {
        found.push(format!("... {total} differing requests in all"));
    }
    found
}

/// How many requests the gateway decided each way.
fn tally(reqs: &[Req], observed: &[Observed]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for (req, o) in reqs.iter().zip(observed) {
        let gw = o.decision();
        let kind = match (gw.upstream, gw.error.as_deref()) {
            (true, _) => "forwarded",
            (false, None) => "respond",
            (false, Some("rate_limited")) => "rate_limited",
            (false, Some("locked_out")) => "locked_out",
            (false, Some("no_route")) => "no_route",
            (false, Some("bad_request")) => "bad_request",
            (false, Some("forbidden")) => "forbidden",
            (false, Some("method_not_allowed")) => "method_not_allowed",
            (false, Some("unauthorized")) => "unauthorized",
            (false, Some("invalid_credentials")) => "invalid_credentials",
            (false, Some("invalid_cost")) => "invalid_cost",
            (false, Some(_)) => "other",
        };
        *counts.entry(kind).or_default() += 1;
        let mut also = |what: &'static str, yes: bool| {
            if yes {
                *counts.entry(what).or_default() += 1;
            }
        };
        also("passed, shadow-rejected", o.decision == "shadow_rejected");
        also("passed, exempt from per_ip", gw.upstream && req.exempt());
        also("rejected with 503", gw.status == Some(503));
        also(
            "denied for a missing key",
            gw.limit.as_deref() == Some("login") && req.header("x-user").is_none_or(str::is_empty),
        );
        also("HTTP/1.0 without Host", req.host.is_none());
        also(
            "refused by failure_limit",
            gw.limit.as_deref() == Some("auth_fail"),
        );
        also(
            "limited per consumer or tenant",
            matches!(gw.limit.as_deref(), Some("per_consumer" | "per_tenant")),
        );
        also(
            "passed with a consumer",
            gw.upstream && req.target.starts_with("/account"),
        );
        also("HEAD", req.method == "HEAD");
        also(
            "limited by a cost limit",
            matches!(gw.limit.as_deref(), Some("tokens" | "tokens_user")),
        );
        also(
            "passed with a cost",
            gw.upstream && req.target.contains("tokens") && req.header("x-cost").is_some(),
        );
        also(
            "XFF from the trusted peer",
            req.peer == TRUSTED_PEER && req.header("x-forwarded-for").is_some(),
        );
    }
    counts
}

/// The mix must exercise every kind of decision, so the comparison cannot
/// pass trivially: the kinds with too few requests, described.
fn thin(counts: &BTreeMap<&'static str, usize>) -> Vec<String> {
    let minimum = [
        ("forwarded", 40),
        ("respond", 15),
        ("rate_limited", 30),
        ("locked_out", 10),
        ("no_route", 15),
        ("bad_request", 15),
        ("forbidden", 15),
        ("method_not_allowed", 5),
        ("passed, shadow-rejected", 3),
        ("passed, exempt from per_ip", 5),
        ("rejected with 503", 5),
        ("denied for a missing key", 3),
        ("HTTP/1.0 without Host", 10),
        ("HEAD", 15),
        ("XFF from the trusted peer", 40),
        ("unauthorized", 5),
        ("invalid_credentials", 10),
        ("refused by failure_limit", 5),
        ("limited per consumer or tenant", 5),
        ("passed with a consumer", 10),
        ("invalid_cost", 3),
        ("limited by a cost limit", 8),
        ("passed with a cost", 10),
    ];
    minimum
        .iter()
        .filter_map(|&(kind, at_least)| {
            let n = counts.get(kind).copied().unwrap_or(0);
            (n < at_least).then(|| format!("only {n} requests '{kind}' (want {at_least})"))
        })
        .collect()
}

/// One seed's requests, through the gateway and through `simulate`.
struct Run {
    reqs: Vec<Req>,
    observed: Vec<Observed>,
    simulated: Vec<Decision>,
    /// The simulate log, kept for a failure message.
    log_path: std::path::PathBuf,
}

/// Sends the requests of `seed` through a fresh gateway (and echo
/// upstream), then replays them with `simulate` over the same config file.
async fn run(seed: u64) -> Run {
    let echo = Echo::start("echo").await;
    let gw = Gateway::start(&config_template(echo.addr())).await;
    let reqs = generate(seed, REQUESTS);
    let (mut observed, log) = through_gateway(&gw, &reqs).await;
    add_access_log(&gw, &mut observed).await;
    let log_path = temp_dir("differential").join("requests.log");
    std::fs::write(&log_path, &log).expect("write the log");
    let simulated = simulate(gw.config_path(), &log_path);
    assert_eq!(simulated.len(), reqs.len(), "one decision per request");
    Run {
        reqs,
        observed,
        simulated,
        log_path,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_simulate_decide_alike() {
    let started = Instant::now();
    let mut failures = Vec::new();
    for seed in SEEDS {
        let run = run(seed).await;
        let counts = tally(&run.reqs, &run.observed);
        eprintln!("seed {seed:#x}: {counts:#?}");
        let mut problems = differences(&run.reqs, &run.observed, &run.simulated);
        problems.extend(thin(&counts));
        if problems.is_empty() {
            if let Some(dir) = run.log_path.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        } else {
            failures.push(format!(
                "seed {seed:#x} (log: {}):\n{}",
                run.log_path.display(),
                problems.join("\n")
            ));
        }
    }
    eprintln!(
        "{} requests in {:.1} s",
        SEEDS.len() * REQUESTS,
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "the gateway and `tollgate simulate` disagree, or the mix is too thin:\n{}",
        failures.join("\n\n")
    );
}
