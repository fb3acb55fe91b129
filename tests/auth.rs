//! Consumers through the real binary (docs/configuration/consumers.md): API
//! keys looked up by digest, identity headers a client cannot forge, `hide`,
//! `failure_limit` lockouts, key rotation by reload, the 401/403 answers
//! (and gRPC's), `GET /consumers`, the access log, `tollgate_auth_total`,
//! `tollgate hash-key`, and the config errors of the `consumers:` section.
//! Limits keyed on the consumer (memory, Redis, two instances). JWTs are in
//! tests/auth_jwt.rs, client certificates in tests/auth_mtls.rs.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use common::client::{self, Proto};
use common::gateway::temp_dir;
use common::jwt;
use common::limits::Caller;
use common::{dedent, Echo, Gateway, OneRoute};

/// Acme's API key (gold plan).
const ACME_KEY: &str = "acme-3f1c9d2e-key";
/// Beta's API key (silver plan).
const BETA_KEY: &str = "beta-77aa01bc-key";
/// The HS256 issuer's secret.
const SECRET: &str = "a-shared-secret-for-the-tests-only";
/// The HS256 issuer.
const ISS: &str = "https://hs.example/";

/// `sha256:<hex>` of `key`, as the config holds API keys.
fn digest(key: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
}

/// A `consumers:` section: API keys in `x-api-key` or `?api_key=`, an HS256
/// issuer (tenant and plan from claims), identity headers, `failure_limit:
/// auth_failures`, acme (gold) and beta (silver); `extra` lines go under
/// `consumers:` (e.g. `hide: true` under api_keys is set by `hide`).
fn consumers(hide: bool, extra: &str) -> String {
    let mut s = dedent(&format!(
        r#"
        consumers:
          api_keys: {{ header: x-api-key, query: api_key, hide: {hide} }}
          jwt:
            issuers:
              - issuer: "{ISS}"
                audiences: [api]
                algorithms: [HS256]
                secret: "{SECRET}"
                tenant: org
                plan: plan
          identity_headers: {{ consumer: x-consumer, tenant: x-tenant, plan: x-plan }}
          failure_limit: auth_failures
          list:
            - {{ name: acme, tenant: acme-corp, plan: gold, keys: ["{}"] }}
            - {{ name: beta, tenant: beta-inc, plan: silver, keys: ["{}"] }}
        "#,
        digest(ACME_KEY),
        digest(BETA_KEY)
    ));
    for line in dedent(extra).lines() {
        s.push_str(&format!("  {line}\n"));
    }
    s
}

/// `failure_limit`'s limit: 5 failures an hour per address, then a lockout.
const FAILURES: &str =
    "{ algorithm: fixed_window, limit: 5, window: 1h, key: client_ip, lockout: { after: 1, duration: 1h } }";

/// Route `all` proxying to `echo` with `auth` (a flow map, or none), a
/// second route `/open` without auth to the same upstream, and the
/// consumers section.
fn gateway(echo: &Echo, auth: Option<&str>, hide: bool) -> String {
    let mut route = OneRoute::proxy(echo)
        .matching("{ path: /api }")
        .define("auth_failures", FAILURES)
        .route("{ name: open, match: { path: /open }, upstream: e }");
    if let Some(auth) = auth {
        route = route.route_keys(&format!("auth: {auth}"));
    }
    route.config() + &consumers(hide, "")
}

/// A token from the HS256 issuer naming `sub` with `extra` claims.
fn hs_token(sub: &str, extra: serde_json::Value) -> String {
    let mut claims = jwt::claims(ISS, "api", sub);
    if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    jwt::hmac_token(SECRET.as_bytes(), "HS256", &claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_in_header_or_query_name_the_consumer() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key] }"), false)).await;
    let addr = gw.addr();

    let r = client::get_with(addr, "/api", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));
    assert_eq!(seen.header("x-tenant").as_deref(), Some("acme-corp"));
    assert_eq!(seen.header("x-plan").as_deref(), Some("gold"));
    // Without hide, the key itself is forwarded.
    assert_eq!(seen.header("x-api-key").as_deref(), Some(ACME_KEY));

    let r = client::get_with(addr, &format!("/api?x=1&api_key={BETA_KEY}"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        echo.last().unwrap().header("x-consumer").as_deref(),
        Some("beta")
    );
    // The header comes first: a good header and a bad query parameter pass.
    let r = client::get_with(addr, "/api?api_key=nope", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 3);

    let r = client::get_with(addr, "/api", &[]).await;
    r.assert_error(401, "unauthorized");
    // The route takes no JWT: no bearer challenge.
    assert_eq!(r.header("www-authenticate"), None);
    client::get_with(addr, "/api", &[("x-api-key", "acme-3f1c9d2e-kex")])
        .await
        .assert_error(401, "invalid_credentials");
    client::get_with(addr, "/api", &[("x-api-key", &ACME_KEY.to_uppercase())])
        .await
        .assert_error(401, "invalid_credentials");
    client::get_with(addr, &format!("/api?api_key={ACME_KEY}x"), &[])
        .await
        .assert_error(401, "invalid_credentials");
    // A bearer token is not among the route's credentials: nothing presented.
    let token = hs_token("acme", json!({}));
    client::get_with(addr, "/api", &[("authorization", &jwt::bearer(&token))])
        .await
        .assert_error(401, "unauthorized");
    assert_eq!(echo.count(), 3, "no refused request reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_answers_challenge_and_name_the_failure() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key, jwt] }"), false)).await;
    let r = client::get(gw.addr(), "/api").await;
    r.assert_error(401, "unauthorized");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"tollgate\"")
    );

    let bad = hs_token("acme", json!({"aud": "elsewhere"}));
    let r = client::get_with(gw.addr(), "/api", &[("authorization", &jwt::bearer(&bad))]).await;
    r.assert_error(401, "invalid_credentials");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"tollgate\", error=\"invalid_token\"")
    );
    // A failed API key on the same route: no challenge (an API key is no
    // HTTP authentication scheme; docs/protocols.md).
    let r = client::get_with(gw.addr(), "/api", &[("x-api-key", "wrong")]).await;
    r.assert_error(401, "invalid_credentials");
    assert_eq!(r.header("www-authenticate"), None);

    let good = hs_token("acme", json!({"org": "acme-corp", "plan": "gold"}));
    let r = client::get_with(gw.addr(), "/api", &[("authorization", &jwt::bearer(&good))]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));
    assert_eq!(seen.header("x-plan").as_deref(), Some("gold"));
    assert_eq!(echo.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_credentials_must_name_one_consumer() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key, jwt] }"), false)).await;
    let acme_token = jwt::bearer(&hs_token("acme", json!({})));
    let beta_token = jwt::bearer(&hs_token("beta", json!({})));
    let both = |key: &'static str, token: String| {
        let addr = gw.addr();
        async move {
            client::get_with(
                addr,
                "/api",
                &[("x-api-key", key), ("authorization", &token)],
            )
            .await
        }
    };
    both(ACME_KEY, beta_token.clone())
        .await
        .assert_error(401, "invalid_credentials");
    both(BETA_KEY, acme_token.clone())
        .await
        .assert_error(401, "invalid_credentials");
    // An invalid one beside a valid one: 401 too.
    both("wrong", acme_token.clone())
        .await
        .assert_error(401, "invalid_credentials");
    assert_eq!(echo.count(), 0);
    let r = both(ACME_KEY, acme_token).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The consumer's tenant and plan come from its entry (the token has none).
    let seen = echo.last().unwrap();
    assert_eq!(seen.header_all("x-consumer"), vec!["acme".to_string()]);
    assert_eq!(seen.header("x-plan").as_deref(), Some("gold"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_not_among_the_routes_plans_is_forbidden() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ plans: [gold] }"), false)).await;
    let r = client::get_with(gw.addr(), "/api", &[("x-api-key", BETA_KEY)]).await;
    r.assert_error(403, "forbidden");
    assert_eq!(echo.count(), 0);
    // A token's plan claim counts: silver is forbidden, gold passes.
    let silver = jwt::bearer(&hs_token("acme", json!({"plan": "silver"})));
    client::get_with(gw.addr(), "/api", &[("authorization", &silver)])
        .await
        .assert_error(403, "forbidden");
    let r = client::get_with(gw.addr(), "/api", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 1);
    // The forbidden consumer is in the access log.
    let line = gw
        .wait_access_log("the 403", |v| v["status"] == 403 && v["consumer"] == "beta")
        .await;
    assert_eq!(line["plan"], "silver", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_requests_get_grpc_statuses() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ plans: [gold] }"), false)).await;
    let grpc = |key: Option<&'static str>| {
        let addr = gw.addr();
        async move {
            let mut b = http::Request::post(format!("http://{addr}/api/svc.Greeter/Hello"))
                .header("content-type", "application/grpc")
                .header("te", "trailers");
            if let Some(key) = key {
                b = b.header("x-api-key", key);
            }
            client::send_on_new_conn(
                addr,
                Proto::H2c,
                b.body(client::full(vec![0u8; 5])).unwrap(),
            )
            .await
            .unwrap()
        }
    };
    for (key, code) in [(None, "16"), (Some("wrong"), "16"), (Some(BETA_KEY), "7")] {
        let r = grpc(key).await;
        assert_eq!(r.status, 200, "gRPC answers are HTTP 200: {key:?}");
        assert_eq!(
            r.header("content-type"),
            Some("application/grpc"),
            "{key:?}"
        );
        // Trailers-only: the status is in the head.
        assert_eq!(
            r.header("grpc-status"),
            Some(code),
            "{key:?}: {:?}",
            r.headers
        );
    }
    assert_eq!(echo.count(), 0);
}

/// A gateway proxying to `echo` with the consumers of [`consumers`],
/// trusting the proxies of `trusted` (a CIDR).
async fn proxy_behind(echo: &Echo, trusted: &str) -> Gateway {
    let config = OneRoute::proxy(echo)
        .server(&format!(r#"trusted_proxies: ["{trusted}"]"#))
        .define("auth_failures", FAILURES)
        .config()
        + &consumers(false, "");
    Gateway::start(&config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identity_headers_never_reach_the_upstream() {
    let echo = Echo::start("e").await;
    let gw = proxy_behind(&echo, "127.0.0.2/32").await;
    let forged = [
        ("x-consumer", "admin"),
        ("X-Tenant", "root"),
        ("x-plan", "unlimited"),
        ("x-original-forwarded-for", "10.1.2.3"),
        ("x-proxyuser-ip", "10.1.2.4"),
    ];
    for peer in [1, 2] {
        let caller = Caller::from(gw.addr(), peer);
        // No credential: every identity header removed.
        let r = caller.get_h("/x", &forged).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let seen = echo.last().unwrap();
        for name in ["x-consumer", "x-tenant", "x-plan"] {
            assert!(
                !seen.has_header(name),
                "peer {peer}: {name} reached the upstream"
            );
        }
        // With a key: the real ones, once each.
        let mut headers = forged.to_vec();
        headers.push(("x-api-key", BETA_KEY));
        caller.get_h("/x", &headers).await;
        let seen = echo.last().unwrap();
        assert_eq!(seen.header_all("x-consumer"), vec!["beta".to_string()]);
        assert_eq!(seen.header_all("x-tenant"), vec!["beta-inc".to_string()]);
        assert_eq!(seen.header_all("x-plan"), vec!["silver".to_string()]);
        // The client-address headers: dropped from the untrusted peer.
        if peer == 1 {
            assert!(
                !seen.has_header("x-original-forwarded-for"),
                "{:?}",
                seen.headers
            );
            assert!(!seen.has_header("x-proxyuser-ip"), "{:?}", seen.headers);
        }
        // The next request (on a pooled upstream connection the last one
        // may have used) has no consumer of its own.
        caller.get_h("/x", &forged).await;
        let seen = echo.last().unwrap();
        assert!(!seen.has_header("x-consumer"), "{:?}", seen.headers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identity_trailers_never_reach_the_upstream() {
    // A backend that merges trailers into headers must not see a forged
    // consumer or client address there either.
    let echo = Echo::start("e").await;
    let gw = proxy_behind(&echo, "127.0.0.1/32").await;
    let r = common::raw::request(
        gw.addr(),
        format!(
            "POST /x HTTP/1.1\r\nHost: x\r\nx-api-key: {BETA_KEY}\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n5\r\nhello\r\n0\r\nX-Consumer: admin\r\nX_Tenant: root\r\n\
             X-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nAuthorization: Bearer forged\r\n\
             Host: evil\r\nX-Checksum: abc\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Only the harmless one is left, even from a trusted peer.
    assert_eq!(r.json()["trailers"], json!([["x-checksum", "abc"]]));
    assert_eq!(
        echo.last().unwrap().header_all("x-consumer"),
        vec!["beta".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_strips_the_key_and_a_verified_token() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, None, true)).await;
    let token = jwt::bearer(&hs_token("acme", json!({})));

    let r = client::get_with(gw.addr(), "/api/x?a=1", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200);
    let seen = echo.last().unwrap();
    assert!(!seen.has_header("x-api-key"), "{:?}", seen.headers);
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));
    assert_eq!(seen.path, "/api/x?a=1");

    client::get(gw.addr(), &format!("/api/y?a=1&api_key={ACME_KEY}&b=2")).await;
    let seen = echo.last().unwrap();
    assert_eq!(seen.path, "/api/y?a=1&b=2");
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));
    client::get(gw.addr(), &format!("/api/z?api_key={ACME_KEY}")).await;
    assert_eq!(echo.last().unwrap().path, "/api/z");
    // A path the gateway normalises: the normal form, without the key.
    client::get(gw.addr(), &format!("/api//a/../w?api_key={ACME_KEY}&c=3")).await;
    assert_eq!(echo.last().unwrap().path, "/api/w?c=3");

    client::get_with(gw.addr(), "/api", &[("authorization", &token)]).await;
    let seen = echo.last().unwrap();
    assert!(!seen.has_header("authorization"), "{:?}", seen.headers);
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));

    // A bearer token that does not verify is not the gateway's to hide,
    // but an API key header always is.
    let bad = jwt::bearer(&hs_token("acme", json!({"iss": "https://other/"})));
    client::get_with(
        gw.addr(),
        "/open",
        &[("authorization", &bad), ("x-api-key", "nope")],
    )
    .await;
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("authorization"), Some(bad));
    assert!(!seen.has_header("x-api-key"));
    assert!(!seen.has_header("x-consumer"));
}

/// The names of `seen`'s headers that an upstream may read as `name`
/// (any case, `_` for `-`).
fn spellings_of(seen: &common::upstream::Recorded, name: &str) -> Vec<String> {
    seen.headers
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| n.replace('_', "-").eq_ignore_ascii_case(name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hide_strips_every_spelling_of_the_key_header() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, None, true)).await;
    // A key in an underscore spelling is no credential (the header is
    // `x-api-key`): on a route with `auth` it is a missing one, on an open
    // route no consumer; either way it never reaches the upstream.
    let auth_gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key] }"), true)).await;
    let r = client::get_with(auth_gw.addr(), "/api", &[("x_api_key", ACME_KEY)]).await;
    r.assert_error(401, "unauthorized");
    let r = client::get_with(gw.addr(), "/open", &[("x_api_key", ACME_KEY)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    assert_eq!(spellings_of(&seen, "x-api-key"), Vec::<String>::new());
    assert!(!seen.has_header("x-consumer"), "{:?}", seen.headers);

    // Beside the real key, in every case and with `_` for `-`, as sent on
    // the wire: the key verifies, and no spelling is forwarded.
    let r = common::raw::request(
        gw.addr(),
        format!(
            "GET /api HTTP/1.1\r\nHost: x\r\nX-Api-Key: {ACME_KEY}\r\nx_api_key: {BETA_KEY}\r\n\
             X_API_KEY: {BETA_KEY}\r\nX-Api_Key: nope\r\nX-ApiKey: other\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("x-consumer").as_deref(), Some("acme"));
    assert_eq!(spellings_of(&seen, "x-api-key"), Vec::<String>::new());
    assert_eq!(
        seen.header("x-apikey").as_deref(),
        Some("other"),
        "another header"
    );

    // Nor in request trailers.
    let r = common::raw::request(
        gw.addr(),
        format!(
            "POST /open HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
             5\r\nhello\r\n0\r\nX-Api-Key: {ACME_KEY}\r\nx_api_key: {ACME_KEY}\r\nX-Checksum: abc\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["trailers"], json!([["x-checksum", "abc"]]));

    // Without `hide`, a header that is no credential is the upstream's.
    let open = Gateway::start(&gateway(&echo, None, false)).await;
    client::get_with(open.addr(), "/open", &[("x_api_key", "mine")]).await;
    assert_eq!(
        echo.last().unwrap().header("x_api_key").as_deref(),
        Some("mine")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_guessing_10000_keys_is_locked_out_and_reaches_nothing() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key] }"), false)).await;
    let caller = Caller::new(gw.addr());
    let statuses: Vec<(u16, String)> = stream::iter(0..10_000)
        .map(|_| {
            let caller = caller.clone();
            async move {
                let key = format!("{:032x}", fastrand::u128(..));
                let r = caller.get_h("/api", &[("x-api-key", &key)]).await;
                let error = r.json()["error"].as_str().unwrap_or("").to_owned();
                (r.status.as_u16(), error)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut counts: BTreeMap<(u16, String), usize> = BTreeMap::new();
    for s in statuses {
        *counts.entry(s).or_default() += 1;
    }
    let expected: BTreeMap<(u16, String), usize> = [
        ((401, "invalid_credentials".to_string()), 5),
        ((429, "locked_out".to_string()), 9_995),
    ]
    .into();
    assert_eq!(counts, expected);
    assert_eq!(echo.count(), 0, "a guessed key reached the upstream");
    let outcome = |o: &'static str| {
        let gw = &gw;
        async move {
            let series = format!("tollgate_auth_total{{route=\"all\",outcome=\"{o}\"}}");
            gw.metric(&series).await.unwrap_or(0.0)
        }
    };
    let (invalid, locked_out) = (outcome("invalid").await, outcome("locked_out").await);
    assert_eq!(invalid + locked_out, 10_000.0);
    assert!(
        locked_out >= 9_000.0,
        "only {locked_out} turned away unverified"
    );
    // Locked out: even the right key is turned away before it is looked up.
    let r = caller.get_h("/api", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["limit"], "auth_failures");
    // Another client is not.
    let r = Caller::from(gw.addr(), 3)
        .get_h("/api", &[("x-api-key", ACME_KEY)])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 1);
    // GET /top: the guesser, once per 429 (the deny cache's included).
    assert_eq!(
        gw.admin_get("/top").await.json(),
        json!({"limits": {"auth_failures": [{"key": "127.0.0.1", "rejected": 9_996, "error": 0}]}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_an_invalid_credential_is_none_but_still_charged() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key] }"), false)).await;
    let caller = Caller::new(gw.addr());
    let token = jwt::bearer(&hs_token("acme", json!({"exp": jwt::now() - 3600})));
    for i in 0..5 {
        let headers: &[(&str, &str)] = if i % 2 == 0 {
            &[("x-api-key", "guess"), ("x-consumer", "acme")]
        } else {
            &[("authorization", &token)]
        };
        let r = caller.get_h("/open", headers).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        let seen = echo.last().unwrap();
        assert!(
            !seen.has_header("x-consumer"),
            "request {i}: {:?}",
            seen.headers
        );
    }
    assert_eq!(echo.count(), 5);
    // The five failures used up `auth_failures`: the next failure, on an
    // auth route, starts the lockout.
    caller
        .get_h("/api", &[("x-api-key", "guess")])
        .await
        .assert_error(429, "locked_out");
    // Locked out, a route without auth still forwards (unverified).
    let r = caller.get_h("/open", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200);
    assert!(!echo.last().unwrap().has_header("x-consumer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_key_prints_the_digest_of_stdin() {
    use std::io::Write;
    use std::process::Stdio;
    for (input, key) in [
        ("k-123\n", "k-123"),
        ("k-123", "k-123"),
        ("k-123\n\n", "k-123\n"),
        (" spaced key\n", " spaced key"),
    ] {
        let mut child = common::reaper::command(common::gateway::BIN)
            .arg("hash-key")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            digest(key),
            "input {input:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_consumers_lists_names_never_keys() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, None, false)).await;
    let r = gw.admin_get("/consumers").await;
    assert_eq!(r.status, 200);
    let text = r.text();
    for secret in [
        ACME_KEY,
        BETA_KEY,
        SECRET,
        &digest(ACME_KEY),
        &digest(BETA_KEY),
    ] {
        assert!(
            !text.contains(secret),
            "GET /consumers shows {secret:?}: {text}"
        );
    }
    let hexes = [ACME_KEY, BETA_KEY].map(|k| digest(k)[7..].to_string());
    assert!(hexes.iter().all(|h| !text.contains(&h[..16])), "{text}");
    let v = r.json();
    let list = v["consumers"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    assert_eq!(list[0]["name"], "acme");
    assert_eq!(list[0]["tenant"], "acme-corp");
    assert_eq!(list[0]["plan"], "gold");
    assert_eq!(list[0]["api_keys"], 1, "{v}");
    assert_eq!(list[1]["name"], "beta");
    let kinds = v["credentials"].as_array().unwrap();
    assert!(
        kinds.contains(&json!("api_key")) && kinds.contains(&json!("jwt")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_and_metrics_carry_the_outcome() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ plans: [gold] }"), false)).await;
    let caller = Caller::new(gw.addr());
    let token = jwt::bearer(&hs_token(
        "acme",
        json!({"org": "acme-corp", "plan": "gold"}),
    ));
    let sent: [(&[(&str, &str)], u16); 6] = [
        (&[("x-api-key", ACME_KEY)], 200),
        (&[("authorization", &token)], 200),
        (&[], 401),
        (&[("x-api-key", "wrong")], 401),
        (&[("x-api-key", BETA_KEY)], 403),
        (&[("x-api-key", ACME_KEY)], 200),
    ];
    for (headers, status) in sent {
        assert_eq!(
            caller.get_h("/api", headers).await.status,
            status,
            "{headers:?}"
        );
    }
    let line = gw
        .wait_access_log("acme's request", |v| v["consumer"] == "acme")
        .await;
    assert_eq!(
        (&line["tenant"], &line["plan"]),
        (&json!("acme-corp"), &json!("gold"))
    );
    let missing = gw.wait_access_log("the 401", |v| v["status"] == 401).await;
    for field in ["consumer", "tenant", "plan"] {
        assert!(
            missing.get(field).is_none(),
            "{field} without a consumer: {missing}"
        );
    }
    let text = gw.admin_get("/metrics").await.text();
    for (outcome, n) in [
        ("ok", 3.0),
        ("missing", 1.0),
        ("invalid", 1.0),
        ("forbidden", 1.0),
    ] {
        let series = format!("tollgate_auth_total{{route=\"all\",outcome=\"{outcome}\"}}");
        assert_eq!(
            common::gateway::parse_metric(&text, &series),
            Some(n),
            "{series} in\n{text}"
        );
    }
    assert!(!text.contains("acme"), "a metric carries a consumer");
}

/// `consumers.file` with acme's `keys`, written to `path` by rename.
fn write_consumers_file(path: &std::path::Path, keys: &[&str]) {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"{}\"", digest(k))).collect();
    let body = format!(
        "- name: acme\n  tenant: acme-corp\n  plan: gold\n  keys: [{}]\n",
        keys.join(", ")
    );
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A gateway whose consumers come from a file (`file`), requiring keys.
fn file_gateway(echo: &Echo, file: &std::path::Path) -> String {
    OneRoute::proxy(echo)
        .route_keys("auth: { require: [api_key] }")
        .config()
        + &dedent(&format!(
            r#"
            consumers:
              api_keys: {{ header: x-api-key }}
              identity_headers: {{ consumer: x-consumer }}
              file: "{}"
            "#,
            file.display()
        ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_rotation_by_reload_under_load_fails_nothing() {
    const OLD: &str = "old-key-0001";
    const NEW: &str = "new-key-0002";
    let echo = Echo::start("e").await;
    let dir = temp_dir("keys");
    let file = dir.join("consumers.yaml");
    write_consumers_file(&file, &[OLD]);
    let gw = Gateway::start(&file_gateway(&echo, &file)).await;
    let use_new = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let caller = Caller::new(gw.addr());
        let (use_new, stop, sent, failed) =
            (use_new.clone(), stop.clone(), sent.clone(), failed.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let key = if use_new.load(Ordering::SeqCst) {
                    NEW
                } else {
                    OLD
                };
                let r = caller.try_get_h("/x", &[("x-api-key", key)]).await;
                sent.fetch_add(1, Ordering::SeqCst);
                if !r.is_ok_and(|r| r.status == 200) {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let reload = |keys: &'static [&'static str]| {
        write_consumers_file(&file, keys);
        async {
            let r = gw.admin_post("/reload").await;
            assert_eq!(r.status, 200, "{}", r.text());
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    reload(&[OLD, NEW]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    use_new.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    reload(&[NEW]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.unwrap();
    }
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent > 100, "only {sent} requests under load");
    assert_eq!(failed.load(Ordering::SeqCst), 0, "of {sent}");
    let old = client::get_with(gw.addr(), "/x", &[("x-api-key", OLD)]).await;
    old.assert_error(401, "invalid_credentials");
    assert_eq!(echo.count(), sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_consumers_file_on_reload_changes_nothing() {
    let echo = Echo::start("e").await;
    let dir = temp_dir("keys");
    let file = dir.join("consumers.yaml");
    write_consumers_file(&file, &[ACME_KEY]);
    let gw = Gateway::start(&file_gateway(&echo, &file)).await;
    let g0 = gw.generation().await;
    for bad in [
        "- name: acme\n  keys: [\"sha256:abcd\"]\n",
        "- name: acme\n  keys: [\"md5:00\"]\n",
        "- { name: a, keys: [] }\n- { name: a, keys: [] }\n",
        "- [ not yaml\n",
    ] {
        std::fs::write(&file, bad).unwrap();
        let r = gw.admin_post("/reload").await;
        assert_eq!(r.status, 400, "{bad:?}: {}", r.text());
        let state = gw.config_state().await;
        assert_eq!(state["generation"], g0, "{bad:?}");
        let error = state["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains("consumers.yaml"),
            "{bad:?}: last_error {error:?}"
        );
        let r = client::get_with(gw.addr(), "/x", &[("x-api-key", ACME_KEY)]).await;
        assert_eq!(r.status, 200, "{bad:?}: the old key stops working");
    }
    client::get(gw.addr(), "/x")
        .await
        .assert_error(401, "unauthorized");
    // The file's consumer is listed, without its key.
    let listed = gw.admin_get("/consumers").await;
    assert_eq!(
        listed.json()["consumers"][0]["name"],
        "acme",
        "{}",
        listed.text()
    );
    assert!(!listed.text().contains(&digest(ACME_KEY)[7..]));
}

/// The config of one route and `rest` (top-level sections, dedented).
fn check_yaml(rest: &str) -> String {
    format!(
        "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: a\n    match: {{ path: / }}\n    respond: {{ status: 200 }}\n{}",
        dedent(rest)
    )
}

#[test]
fn consumers_config_errors_name_file_line_column_and_field() {
    let dir = temp_dir("check");
    let jwt = |keys: &str| {
        format!("consumers:\n  jwt:\n    issuers:\n      - issuer: \"https://i/\"\n{keys}")
    };
    let listed =
        |entries: &str| format!("consumers:\n  api_keys: {{ header: k }}\n  list:\n{entries}");
    let a = digest("a");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            jwt("        algorithms: [RS257]\n        secret: s\n"),
            "RS257",
            "consumers.jwt.issuers[0].algorithms[0]",
        ),
        (
            jwt("        algorithms: [HS256, none]\n        secret: s\n"),
            "none",
            "consumers.jwt.issuers[0].algorithms[1]",
        ),
        (
            jwt("        algorithms: [RS256]\n        secret: s\n"),
            "RS256",
            "consumers.jwt.issuers[0].algorithms[0]",
        ),
        (
            jwt("        keys: [{ pem: missing.pem }]\n"),
            "missing.pem",
            "consumers.jwt.issuers[0].keys[0].pem",
        ),
        (
            jwt("        jwks: { file: missing.json }\n"),
            "missing.json",
            "consumers.jwt.issuers[0].jwks.file",
        ),
        (
            listed("    - { name: a, keys: [\"sha256:abc\"] }\n"),
            "sha256:abc",
            "consumers.list[0].keys[0]",
        ),
        (
            listed("    - { name: a, keys: [] }\n    - { name: a, keys: [] }\n"),
            "- { name: a, keys: [] }\n    - { name: a",
            "consumers.list[1].name",
        ),
        (
            listed(&format!(
                "    - {{ name: a, keys: [\"{a}\"] }}\n    - {{ name: b, keys: [\"{a}\"] }}\n"
            )),
            "name: b",
            "consumers.list[1].keys[0]",
        ),
        (
            "limits:\n  per_consumer: { algorithm: fixed_window, limit: 1, window: 1m, key: consumer }\n"
                .to_string(),
            "key: consumer",
            "limits.per_consumer.key",
        ),
        (
            "consumers:\n  mtls: { consumer: san_uri }\n".to_string(),
            "mtls",
            "consumers.mtls",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (rest, marker, field)) in cases.iter().enumerate() {
        let yaml = check_yaml(rest);
        let line = yaml
            .find(marker)
            .map(|at| yaml[..at].matches('\n').count() + 1)
            .unwrap();
        // A marker spanning lines points at its last line's entry.
        let line = line + marker.matches('\n').count();
        let path = dir.join(format!("case{i}.yaml"));
        std::fs::write(&path, &yaml).unwrap();
        let path = path.display().to_string();
        let (code, out, err) = common::gateway::run_cli(&["check", "-c", &path], &[], None);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let at = format!("{path}:{line}:");
        let column = first
            .split_once(&at)
            .and_then(|(_, rest)| rest.split(':').next())
            .is_some_and(|c| c.parse::<u32>().is_ok());
        if code != 1 || !column || !first.contains(field) {
            failures.push(format!(
                "case {i} ({field}, want `{at}<col>: {field}`): exit {code}, stderr {err:?}, stdout {out:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Route `all` requiring an API key under `per_consumer` (3 an hour per
/// consumer), on `store` (a flow map) when given.
fn per_consumer(echo: &Echo, store: Option<&str>, key: &str) -> String {
    let mut route = OneRoute::proxy(echo)
        .route_keys("auth: { require: [api_key] }")
        .define("auth_failures", FAILURES)
        .limit(
            "per_consumer",
            &format!("{{ algorithm: fixed_window, limit: 3, window: 1h, key: {key} }}"),
        );
    if let Some(store) = store {
        route = route.store(store);
    }
    route.config() + &consumers(false, "")
}

/// From one address: acme and beta get 3 each, then 429 naming
/// `per_consumer` (`gateways` take turns).
async fn three_each(gateways: &[&Gateway], echo: &Echo) {
    let before = echo.count();
    for key in [ACME_KEY, BETA_KEY] {
        let mut statuses = Vec::new();
        for i in 0..5 {
            let gw = gateways[i % gateways.len()];
            let r = client::get_with(gw.addr(), "/", &[("x-api-key", key)]).await;
            if r.status == 429 {
                assert_eq!(r.json()["limit"], "per_consumer", "{}", r.text());
            }
            statuses.push(r.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 429, 429], "{key}");
    }
    assert_eq!(echo.count(), before + 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_keys_give_per_consumer_buckets_in_memory() {
    let echo = Echo::start("e").await;
    for key in ["consumer", "tenant", "[consumer, client_ip]"] {
        let gw = Gateway::start(&per_consumer(&echo, None, key)).await;
        three_each(&[&gw], &echo).await;
    }
    // `plan` keys: acme (gold) and beta (silver) have a bucket each too,
    // and a request without a consumer is not charged to any of them.
    let gw = Gateway::start(&per_consumer(&echo, None, "plan")).await;
    client::get(gw.addr(), "/")
        .await
        .assert_error(401, "unauthorized");
    three_each(&[&gw], &echo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_keys_on_redis_are_shared_by_two_instances() {
    let redis = common::redis::RedisServer::start();
    let store = format!(
        "{{ backend: redis, url: \"{}\", prefix: auth, timeout: 3s, on_error: deny }}",
        redis.url()
    );
    let echo = Echo::start("e").await;
    let config = per_consumer(&echo, Some(&store), "consumer");
    let one = Gateway::start(&config).await;
    let two = Gateway::start(&config).await;
    // Alternating between the two: 3 per consumer in all.
    three_each(&[&one, &two], &echo).await;
    // Each alone agrees.
    for gw in [&one, &two] {
        let r = client::get_with(gw.addr(), "/", &[("x-api-key", ACME_KEY)]).await;
        assert_eq!(r.status, 429, "{}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_failure_limit_without_lockout_valid_keys_still_pass() {
    let echo = Echo::start("e").await;
    let config = OneRoute::proxy(&echo)
        .matching("{ path: /api }")
        .route_keys("auth: { require: [api_key] }")
        .define(
            "auth_failures",
            "{ algorithm: fixed_window, limit: 2, window: 1h, key: client_ip }",
        )
        .route("{ name: open, match: { path: /open }, upstream: e }")
        .config()
        + &consumers(false, "");
    let gw = Gateway::start(&config).await;
    let caller = Caller::new(gw.addr());
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = caller.get_h("/api", &[("x-api-key", "guess")]).await;
        statuses.push((
            r.status.as_u16(),
            r.json()["error"].as_str().map(str::to_owned),
        ));
    }
    let invalid = (401, Some("invalid_credentials".to_string()));
    let limited = (429, Some("rate_limited".to_string()));
    assert_eq!(
        statuses,
        [invalid.clone(), invalid, limited.clone(), limited]
    );
    // Not locked out: a valid key is verified and passes, on either route,
    // and names its consumer.
    for path in ["/api", "/open"] {
        let r = caller.get_h(path, &[("x-api-key", ACME_KEY)]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(
            echo.last().unwrap().header("x-consumer").as_deref(),
            Some("acme")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_and_claim_keys() {
    let echo = Echo::start("e").await;
    let config = OneRoute::proxy(&echo)
        .route_keys("auth: { require: [api_key, jwt] }")
        .define("auth_failures", FAILURES)
        .limit(
            "per_region",
            "{ algorithm: fixed_window, limit: 3, window: 1h, key: \"attr:region\", on_missing_key: skip }",
        )
        .limit(
            "per_org",
            "{ algorithm: fixed_window, limit: 2, window: 1h, key: \"claim:org.id\", on_missing_key: skip, exempt: [\"claim:org.id=free\"] }",
        )
        .config()
        + &consumers(false, "")
            .replace(
                "keys: [\"",
                "attributes: { region: eu }, keys: [\"",
            );
    let gw = Gateway::start(&config).await;
    // acme and beta share region eu: 3 between them.
    let mut statuses = Vec::new();
    for key in [ACME_KEY, BETA_KEY, ACME_KEY, BETA_KEY] {
        let r = client::get_with(gw.addr(), "/", &[("x-api-key", key)]).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Tokens (no consumer entry of their subject, so no region): keyed on
    // the nested claim; org "free" is exempt.
    let token = |sub: &str, org: &str| jwt::bearer(&hs_token(sub, json!({"org": {"id": org}})));
    let mut statuses = Vec::new();
    for (sub, org) in [("u1", "o1"), ("u2", "o1"), ("u3", "o1"), ("u4", "o2")] {
        let r = client::get_with(gw.addr(), "/", &[("authorization", &token(sub, org))]).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 200]);
    for i in 0..4 {
        let r = client::get_with(
            gw.addr(),
            "/",
            &[("authorization", &token(&format!("f{i}"), "free"))],
        )
        .await;
        assert_eq!(r.status, 200, "free {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_lockout_on_redis_holds_on_another_instance() {
    let redis = common::redis::RedisServer::start();
    let store = format!(
        "{{ backend: redis, url: \"{}\", prefix: authlock, timeout: 3s, on_error: deny }}",
        redis.url()
    );
    let echo = Echo::start("e").await;
    let config = OneRoute::proxy(&echo)
        .matching("{ path: /api }")
        .route_keys("auth: { require: [api_key] }")
        .define("auth_failures", FAILURES)
        .store(&store)
        .config()
        + &consumers(false, "");
    let (one, two) = (Gateway::start(&config).await, Gateway::start(&config).await);
    let mut statuses = Vec::new();
    // Five failures alternating, the sixth (which starts the lockout) on
    // instance one.
    for gw in [&two, &one, &two, &one, &two, &one] {
        let r = client::get_with(gw.addr(), "/api", &[("x-api-key", "guess")]).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    let r = client::get_with(one.addr(), "/api", &[("x-api-key", ACME_KEY)]).await;
    r.assert_error(429, "locked_out");
    // Instance two learns of the lockout from the store at the client's
    // next failed credential there (a valid key before that is verified);
    // from then on it turns the client away unverified too.
    let r = client::get_with(two.addr(), "/api", &[("x-api-key", ACME_KEY)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = client::get_with(two.addr(), "/api", &[("x-api-key", "guess")]).await;
    r.assert_error(429, "locked_out");
    let r = client::get_with(two.addr(), "/api", &[("x-api-key", ACME_KEY)]).await;
    r.assert_error(429, "locked_out");
    assert_eq!(echo.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_spelt_with_underscores_are_removed_too() {
    // NGINX, CGI and WSGI make `X_Consumer` the same variable as
    // `X-Consumer` (docs/protocols.md drops such spellings of the
    // client-address headers for the same reason).
    let echo = Echo::start("e").await;
    let gw = proxy_behind(&echo, "127.0.0.2/32").await;
    let forged = [
        ("x_consumer", "admin"),
        ("X_Tenant", "root"),
        ("x-plan", "unlimited"),
        ("x_plan", "unlimited"),
    ];
    for peer in [1, 2] {
        for key in [None, Some(BETA_KEY)] {
            let mut headers = forged.to_vec();
            headers.extend(key.map(|k| ("x-api-key", k)));
            let r = Caller::from(gw.addr(), peer).get_h("/x", &headers).await;
            assert_eq!(r.status, 200);
            let seen = echo.last().unwrap();
            let identity: Vec<&(String, String)> = seen
                .headers
                .iter()
                .filter(|(n, _)| {
                    ["x-consumer", "x-tenant", "x-plan"].contains(&n.replace('_', "-").as_str())
                })
                .collect();
            let want: Vec<(String, String)> = match key {
                None => vec![],
                Some(_) => vec![
                    ("x-consumer".into(), "beta".into()),
                    ("x-plan".into(), "silver".into()),
                    ("x-tenant".into(), "beta-inc".into()),
                ],
            };
            let mut identity: Vec<(String, String)> = identity.into_iter().cloned().collect();
            identity.sort();
            assert_eq!(identity, want, "peer 127.0.0.{peer}, key {key:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_edge_cases() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&gateway(&echo, Some("{ require: [api_key, jwt] }"), true)).await;
    // Each request from its own address: the failures are not to add up
    // to a lockout.
    let peer = std::sync::atomic::AtomicU8::new(10);
    let get = |path: &str, headers: &[(&str, &str)]| {
        let (caller, path, headers): (Caller, String, Vec<(String, String)>) = (
            Caller::from(gw.addr(), peer.fetch_add(1, Ordering::SeqCst)),
            path.to_owned(),
            headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        );
        async move {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let r = caller.get_h(&path, &headers).await;
            let error = r
                .json()
                .get("error")
                .and_then(|e| e.as_str())
                .map(str::to_owned);
            (r.status.as_u16(), error.unwrap_or_default())
        }
    };
    let ok = (200, String::new());
    let invalid = (401, "invalid_credentials".to_string());
    let missing = (401, "unauthorized".to_string());
    let token = jwt::bearer(&hs_token("acme", json!({})));
    // The same valid key twice is two keys: invalid.
    assert_eq!(
        get("/api", &[("x-api-key", ACME_KEY), ("x-api-key", ACME_KEY)]).await,
        invalid
    );
    // Two Authorization fields: invalid.
    assert_eq!(
        get(
            "/api",
            &[("authorization", &token), ("authorization", &token)]
        )
        .await,
        invalid
    );
    // Another scheme is no bearer token.
    assert_eq!(
        get("/api", &[("authorization", "Basic YWNtZTpzZWNyZXQ=")]).await,
        missing
    );
    assert_eq!(
        get(
            "/api",
            &[("authorization", &token.replacen("Bearer", "bearer", 1))]
        )
        .await,
        ok
    );
    // An empty key header counts as absent: the query's key is used,
    // percent-encoded and all, and hidden whatever its spelling.
    let encoded = ACME_KEY.replace('-', "%2D");
    assert_eq!(
        get(
            &format!("/api/q?api%5Fkey={encoded}&k=v"),
            &[("x-api-key", "")]
        )
        .await,
        ok
    );
    assert_eq!(echo.last().unwrap().path, "/api/q?k=v");
    // A consumer claim that is not a printable header value names nobody.
    for sub in [
        json!("a b"),
        json!("caf\u{e9}"),
        json!(""),
        json!(["acme"]),
        json!(null),
    ] {
        let t = jwt::bearer(&hs_token("x", json!({ "sub": sub })));
        assert_eq!(
            get("/api", &[("authorization", &t)]).await,
            invalid,
            "sub {sub}"
        );
    }
    // A numeric one is its decimal text.
    let t = jwt::bearer(&hs_token("x", json!({"sub": 4711})));
    assert_eq!(get("/api", &[("authorization", &t)]).await, ok);
    assert_eq!(
        echo.last().unwrap().header("x-consumer").as_deref(),
        Some("4711")
    );
    assert_eq!(echo.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_consume_nothing_of_the_routes_limits() {
    let echo = Echo::start("e").await;
    let config = OneRoute::proxy(&echo)
        .route_keys("auth: { plans: [gold] }")
        .define("auth_failures", FAILURES)
        .limit(
            "two",
            "{ algorithm: fixed_window, limit: 2, window: 1h, key: route }",
        )
        .config()
        + &consumers(false, "");
    let gw = Gateway::start(&config).await;
    for (peer, headers, status) in [
        (5, vec![], 401),
        (5, vec![("x-api-key", "wrong")], 401),
        (6, vec![("x-api-key", BETA_KEY)], 403),
        (6, vec![("x-api-key", BETA_KEY)], 403),
        (7, vec![("authorization", "Bearer x.y.z")], 401),
        (7, vec![], 401),
    ] {
        let r = Caller::from(gw.addr(), peer).get_h("/", &headers).await;
        assert_eq!(r.status, status, "{headers:?}: {}", r.text());
    }
    let caller = Caller::from(gw.addr(), 8);
    let statuses = caller.statuses("/", &[("x-api-key", ACME_KEY)], 3).await;
    assert_eq!(statuses, [200, 200, 429]);
}
