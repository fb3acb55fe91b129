//! The dashboard and what it polls (docs/operations.md): `GET /api/stats` counts
//! exactly what happened, stays small and quick with 100 routes and 10,000
//! lockouts, and everything but `/healthz` and `/readyz` keeps behind the
//! admin token, the page included. The page itself is driven in a real
//! browser by `tests/browser/` (run by `tests/run`).

mod common;

use std::time::{Duration, Instant};

use common::gateway::parse_metric;
use common::{client, config, eventually, Gateway, OneRoute};
use http::Method;
use serde_json::Value;

/// An admin request with optional headers.
async fn admin(gw: &Gateway, method: Method, path: &str, headers: &[(&str, &str)]) -> common::Resp {
    let mut b = client::req(method, gw.admin_addr(), path);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    client::send(&client::h1(), b.body(client::empty()).unwrap()).await
}

async fn stats(gw: &Gateway, query: &str) -> Value {
    let r = gw.admin_get(&format!("/api/stats{query}")).await;
    assert_eq!(r.status, 200, "GET /api/stats{query}: {}", r.text());
    r.json()
}

/// The entry named `name` of a JSON array of objects with a `name`.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no {name:?} in {list}"))
}

fn sum(v: &Value) -> u64 {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test]
async fn stats_count_exactly_what_happened() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          few: { algorithm: fixed_window, limit: 3, window: 1m, key: client_ip }
          strict: { algorithm: fixed_window, limit: 2, window: 1m, key: client_ip, lockout: { duration: 1m } }
        routes:
          - name: a
            match: { exact: /a }
            respond: { status: 200, body: "a" }
            limits: [few]
          - name: b
            match: { exact: /b }
            respond: { status: 200, body: "b" }
            limits: [strict]
          - name: c
            match: { exact: /c }
            respond: { status: 200, body: "c" }
        "#,
    ))
    .await;
    let mut statuses = Vec::new();
    for (path, n) in [("/a", 5), ("/b", 4), ("/c", 3), ("/nope", 2)] {
        for _ in 0..n {
            statuses.push((path, client::get(gw.addr(), path).await.status.as_u16()));
        }
    }
    let count = |p: &str, s: u16| statuses.iter().filter(|x| **x == (p, s)).count();
    assert_eq!((count("/a", 200), count("/a", 429)), (3, 2));
    assert_eq!((count("/b", 200), count("/b", 429)), (2, 2));

    // The access log is written when a response ends, and so is the count:
    // wait until the last one is in.
    let v = eventually(Duration::from_secs(5), "14 requests counted", || async {
        let v = stats(&gw, "").await;
        let n: u64 = v["routes"]
            .as_array()?
            .iter()
            .map(|r| r["requests"].as_u64().unwrap_or(0))
            .sum();
        (n == 14).then_some(v)
    })
    .await;

    let routes = &v["routes"];
    let row = |name: &str| {
        let r = named(routes, name);
        (
            r["requests"].as_u64().unwrap(),
            r["rejected"].as_u64().unwrap(),
            r["locked_out"].as_u64().unwrap(),
        )
    };
    assert_eq!(row("a"), (5, 2, 0));
    assert_eq!(row("b"), (4, 0, 2));
    assert_eq!(row("c"), (3, 0, 0));
    assert_eq!(row(""), (2, 0, 0), "unmatched requests");
    assert_eq!(named(routes, "a")["limits"], serde_json::json!(["few"]));
    assert!(named(routes, "a")["p99_ms"].is_number() || named(routes, "a")["p99_ms"].is_null());

    let limits = &v["limits"];
    let few = named(limits, "few");
    assert_eq!(few["algorithm"], "fixed_window");
    assert_eq!(few["decisions"]["allowed"], 3);
    assert_eq!(few["decisions"]["rejected"], 2);
    assert_eq!(few["lockouts"], 0);
    let strict = named(limits, "strict");
    assert_eq!(strict["decisions"]["allowed"], 2);
    assert_eq!(strict["decisions"]["rejected"], 0);
    assert_eq!(strict["decisions"]["locked_out"], 2);
    assert_eq!(strict["lockouts"], 1);
    assert_eq!(strict["locked_now"], 1);

    let lockouts = &v["lockouts"];
    assert_eq!(lockouts["total"], 1);
    assert_eq!(lockouts["items"][0]["limit"], "strict");
    assert_eq!(lockouts["items"][0]["key"], "127.0.0.1");
    let left = lockouts["items"][0]["remaining"].as_u64().unwrap();
    assert!((55..=60).contains(&left), "{left}");

    assert_eq!(v["config"]["generation"], 1);
    assert_eq!(v["config"]["store"], "memory");
    assert!(v["config"]["last_error"].is_null());

    // The Prometheus series say the same.
    let metrics = gw.admin_get("/metrics").await.text();
    let m = |s: &str| parse_metric(&metrics, s).unwrap_or(0.0) as u64;
    assert_eq!(
        m(r#"tollgate_limit_decisions_total{route="a",limit="few",decision="rejected"}"#),
        2
    );
    assert_eq!(
        m(r#"tollgate_limit_decisions_total{route="b",limit="strict",decision="locked_out"}"#),
        2
    );
    assert_eq!(m(r#"tollgate_lockouts_total{limit="strict"}"#), 1);

    // The per-second samples add up to the totals once sampled.
    let v = eventually(Duration::from_secs(5), "the samples add up", || async {
        let v = stats(&gw, "").await;
        let s = &v["series"];
        (sum(&s["routes"]["a"]["requests"]) == 5 && sum(&s["total"]["requests"]) == 14).then_some(v)
    })
    .await;
    let s = &v["series"];
    assert_eq!(sum(&s["routes"]["a"]["rejected"]), 2);
    assert_eq!(sum(&s["routes"]["b"]["locked_out"]), 2);
    assert_eq!(sum(&s["limits"]["strict"]["lockouts"]), 1);
    assert_eq!(sum(&s["limits"]["few"]["allowed"]), 3);
    let n = s["t"].as_array().unwrap().len();
    assert_eq!(s["routes"]["c"]["requests"].as_array().unwrap().len(), n);
    assert_eq!(s["seq"].as_array().unwrap().last(), Some(&v["seq"]));

    // `since` returns only the samples after it.
    let seq = v["seq"].as_u64().unwrap();
    let later = stats(&gw, &format!("?since={seq}")).await;
    let newer = later["seq"].as_u64().unwrap() - seq;
    assert_eq!(later["series"]["t"].as_array().unwrap().len() as u64, newer);
    assert!(stats(&gw, "?series=0").await["series"].is_null());
}

#[tokio::test]
async fn ten_thousand_lockouts_answer_a_capped_list_quickly() {
    const CLIENTS: usize = 10_000;
    // 100 routes, and a limit of one request per client per hour (a bucket:
    // no window edge for the two requests to straddle on a slow machine),
    // so each client is locked out by its second request.
    let mut routes = String::from(
        "routes:\n  - name: login\n    match: { exact: /login }\n    respond: { status: 200 }\n    limits: [one]\n",
    );
    for i in 0..99 {
        routes.push_str(&format!(
            "  - name: r{i}\n    match: {{ exact: /r{i} }}\n    respond: {{ status: 200 }}\n"
        ));
    }
    let gw = Gateway::start(&config(&format!(
        "limits:\n  one: {{ algorithm: token_bucket, rate: 1/h, burst: 1, key: \"header:x-user\", lockout: {{ duration: 10m }} }}\n{routes}"
    )))
    .await;

    let started = Instant::now();
    let addr = gw.addr();
    let workers = 16;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            tokio::spawn(async move {
                let http = client::h1();
                let mut locked = 0;
                for i in (w..CLIENTS).step_by(workers) {
                    let user = format!("user-{i}");
                    let login = || {
                        client::req(Method::GET, addr, "/login")
                            .header("x-user", &user)
                            .body(client::empty())
                            .unwrap()
                    };
                    assert_eq!(client::send(&http, login()).await.status, 200);
                    let r = client::send(&http, login()).await;
                    if r.status == 429 && r.json()["error"] == "locked_out" {
                        locked += 1;
                    }
                }
                locked
            })
        })
        .collect();
    let mut locked = 0;
    for t in tasks {
        locked += t.await.unwrap();
    }
    assert_eq!(
        locked, CLIENTS,
        "every client's second request locks it out"
    );
    eprintln!("{CLIENTS} lockouts made in {:?}", started.elapsed());

    let t = Instant::now();
    let r = gw.admin_get("/api/stats").await;
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    assert!(
        took < Duration::from_secs(2),
        "GET /api/stats took {took:?}"
    );
    assert!(r.body.len() < 200_000, "{} bytes", r.body.len());
    eprintln!(
        "/api/stats with {CLIENTS} lockouts: {took:?}, {} bytes",
        r.body.len()
    );
    let v = r.json();
    assert_eq!(v["routes"].as_array().unwrap().len(), 100);
    let lockouts = &v["lockouts"];
    assert_eq!(lockouts["total"], CLIENTS);
    assert_eq!(lockouts["matching"], CLIENTS);
    assert_eq!(lockouts["shown"], 200);
    assert_eq!(lockouts["by_limit"]["one"], CLIENTS);
    let items = lockouts["items"].as_array().unwrap();
    assert_eq!(items.len(), 200);
    let left: Vec<u64> = items
        .iter()
        .map(|i| i["remaining_ms"].as_u64().unwrap())
        .collect();
    assert!(
        left.windows(2).all(|w| w[0] >= w[1]),
        "the longest remaining first"
    );
    assert_eq!(named(&v["limits"], "one")["locked_now"], CLIENTS);
    assert_eq!(named(&v["limits"], "one")["lockouts"], CLIENTS);

    // The cap has a ceiling; filters narrow the list, the total stays.
    let v = stats(&gw, "?series=0&lockouts=5000").await;
    assert_eq!(v["lockouts"]["shown"], 1000);
    let v = stats(&gw, "?series=0&key=USER-4242").await;
    assert_eq!(v["lockouts"]["matching"], 1);
    assert_eq!(v["lockouts"]["total"], CLIENTS);
    assert_eq!(v["lockouts"]["items"][0]["key"], "user-4242");
    let v = stats(&gw, "?series=0&limit=nope").await;
    assert_eq!(v["lockouts"]["matching"], 0);

    // GET /lockouts: complete by default, capped on demand.
    let all = gw.admin_get("/lockouts").await.json();
    assert_eq!(all["count"], CLIENTS);
    assert_eq!(all["lockouts"]["one"].as_array().unwrap().len(), CLIENTS);
    let few = gw.admin_get("/lockouts?max=10").await.json();
    assert_eq!(few["count"], CLIENTS);
    assert_eq!(few["truncated"], true);
    assert_eq!(few["lockouts"]["one"].as_array().unwrap().len(), 10);

    // Unlocking shows at once (the cached list is dropped).
    let r = admin(&gw, Method::DELETE, "/limits/one/user-4242", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = stats(&gw, "?series=0&key=user-4242").await;
    assert_eq!(v["lockouts"]["total"], CLIENTS - 1);
    assert_eq!(v["lockouts"]["matching"], 0);
}

#[tokio::test]
async fn the_token_guards_the_page_and_the_stats() {
    let gw = OneRoute::new()
        .named("a")
        .admin(r#"token: "t0k3n""#)
        .start()
        .await;
    let bearer = [("authorization", "Bearer t0k3n")];
    let wrong = [("authorization", "Bearer t0k3m")];

    // The page without the token: 401, and a form asking for it.
    let r = admin(&gw, Method::GET, "/", &[]).await;
    assert_eq!(r.status, 401);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    assert!(r.text().contains("name=\"token\""), "{}", r.text());
    assert!(!r.text().contains("/api/stats"));
    assert_eq!(
        admin(&gw, Method::GET, "/?token=nope", &[]).await.status,
        401
    );
    assert_eq!(admin(&gw, Method::GET, "/", &wrong).await.status, 401);

    // With it, as a query parameter (a browser opening the page) or a header.
    for r in [
        admin(&gw, Method::GET, "/?token=t0k3n", &[]).await,
        admin(&gw, Method::GET, "/", &bearer).await,
    ] {
        assert_eq!(r.status, 200);
        assert!(r.text().contains("/api/stats"));
        assert!(r
            .header("content-security-policy")
            .unwrap()
            .starts_with("default-src 'none'"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }

    // The API takes the header only: a token in a URL stays out of logs
    // and histories for everything but opening the page.
    for path in [
        "/api/stats",
        "/api/stats?token=t0k3n",
        "/metrics?token=t0k3n",
        "/lockouts",
        "/config",
    ] {
        let r = admin(&gw, Method::GET, path, &[]).await;
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.json()["error"], "unauthorized");
    }
    assert_eq!(
        admin(&gw, Method::GET, "/api/stats", &wrong).await.status,
        401
    );
    let r = admin(&gw, Method::GET, "/api/stats", &bearer).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["config"]["generation"], 1);
    assert_eq!(
        admin(&gw, Method::DELETE, "/limits/x/y", &[]).await.status,
        401
    );

    // Health and readiness stay open.
    assert_eq!(admin(&gw, Method::GET, "/healthz", &[]).await.status, 200);
    let r = admin(&gw, Method::GET, "/readyz", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["generation"], 1);
}

#[tokio::test]
async fn any_case_of_bearer_passes_and_two_authorization_fields_are_a_400() {
    let gw = OneRoute::new()
        .named("a")
        .admin(r#"token: "t0k3n""#)
        .start()
        .await;
    // Every endpoint that needs the token, and what it answers with it.
    let guarded: [(Method, &str, u16); 8] = [
        (Method::GET, "/", 200),
        (Method::GET, "/api/stats", 200),
        (Method::GET, "/config", 200),
        (Method::GET, "/metrics", 200),
        (Method::GET, "/lockouts", 200),
        (Method::GET, "/upstreams", 200),
        (Method::GET, "/limits/nope/k", 404),
        (Method::DELETE, "/limits/nope/k", 404),
    ];
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        for spaces in [" ", "  "] {
            let value = format!("{scheme}{spaces}t0k3n");
            for (method, path, want) in &guarded {
                let r = admin(&gw, method.clone(), path, &[("authorization", &value)]).await;
                assert_eq!(
                    r.status,
                    *want,
                    "{method} {path} with {value:?}: {}",
                    r.text()
                );
            }
        }
    }
    for bad in [
        "Bearert0k3n",
        "Bearer",
        "Basic t0k3n",
        "Bearer t0k3",
        "t0k3n",
    ] {
        let r = admin(&gw, Method::GET, "/config", &[("authorization", bad)]).await;
        assert_eq!(r.status, 401, "{bad:?}");
    }

    // Two fields: whichever is right, the request is ambiguous.
    let right = ("authorization", "Bearer t0k3n");
    let wrong = ("authorization", "Bearer t0k3m");
    for pair in [[right, right], [right, wrong], [wrong, right]] {
        for (method, path, _) in &guarded {
            let r = admin(&gw, method.clone(), path, &pair).await;
            assert_eq!(r.status, 400, "{method} {path} with {pair:?}: {}", r.text());
            assert_eq!(r.json()["error"], "bad_request", "{method} {path}");
        }
        let r = admin(&gw, Method::GET, "/?token=t0k3n", &pair).await;
        assert_eq!(r.status, 400, "the page with {pair:?}");
        let r = admin(&gw, Method::POST, "/reload", &pair).await;
        assert_eq!(r.status, 400, "POST /reload with {pair:?}");
        // Health and readiness need no token, so no field is read.
        for path in ["/healthz", "/readyz"] {
            assert_eq!(admin(&gw, Method::GET, path, &pair).await.status, 200);
        }
    }
    let config = admin(&gw, Method::GET, "/config", &[right]).await;
    assert_eq!(
        config.json()["generation"],
        1,
        "an ambiguous reload went through"
    );
}

#[tokio::test]
async fn without_a_token_the_page_is_open_and_methods_are_checked() {
    let gw = OneRoute::new().named("a").start().await;
    let r = gw.admin_get("/").await;
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.starts_with("<!doctype html>"));
    // Self-contained: no script, style or font from anywhere else.
    assert!(
        !html.contains("src=") && !html.contains("https://"),
        "external reference"
    );
    for (method, path, allow) in [
        (Method::POST, "/", "GET"),
        (Method::POST, "/api/stats", "GET"),
        (Method::GET, "/reload", "POST"),
        (Method::POST, "/limits/a/b", "GET, DELETE"),
    ] {
        let r = admin(&gw, method.clone(), path, &[]).await;
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
    }
}

#[tokio::test]
async fn a_failed_reload_shows_in_the_stats() {
    let template = OneRoute::new().named("a").config();
    let gw = Gateway::start(&template).await;
    let v = stats(&gw, "?series=0").await;
    assert!(v["config"]["last_reload"].is_null());
    assert_eq!(v["config"]["reloads"]["failure"], 0);

    gw.rewrite_config(&format!("{template}  - name: b\n    matchh: {{}}\n"));
    assert_eq!(gw.admin_post("/reload").await.status, 400);
    let v = stats(&gw, "?series=0").await;
    let c = &v["config"];
    assert_eq!(c["generation"], 1);
    assert_eq!(c["last_reload"]["result"], "failure");
    assert_eq!(c["reloads"]["failure"], 1);
    assert!(c["last_error"].as_str().unwrap().contains("matchh"), "{c}");

    gw.rewrite_config(&template);
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    let c = stats(&gw, "?series=0").await["config"].clone();
    assert_eq!(c["generation"], 2);
    assert_eq!(c["last_reload"]["result"], "success");
    assert!(c["last_error"].is_null());
}

#[tokio::test]
async fn top_lists_the_clients_rejected_most() {
    let gw = OneRoute::new()
        .limit(
            "once",
            r#"{ algorithm: fixed_window, limit: 1, window: 1h, key: "header:x-user" }"#,
        )
        .limit(
            "never",
            "{ algorithm: fixed_window, limit: 1000, window: 1h }",
        )
        .start()
        .await;
    // ann: 1 allowed, 5 rejected; bob: 1 allowed, 2 rejected; cy: none.
    for (user, n) in [("ann", 6), ("bob", 3), ("cy", 1)] {
        for _ in 0..n {
            client::get_with(gw.addr(), "/", &[("x-user", user)]).await;
        }
    }
    let top = gw.admin_get("/top").await;
    assert_eq!(top.status, 200);
    assert_eq!(
        top.json(),
        serde_json::json!({"limits": {"once": [
            {"key": "ann", "rejected": 5, "error": 0},
            {"key": "bob", "rejected": 2, "error": 0}
        ]}}),
        "a limit that rejected nobody is not listed"
    );
}
