//! Proxying: upstream errors and timeouts, retries, balancing, header hygiene,
//! X-Forwarded-* and trusted proxies, the other identity headers (underscore
//! spellings, vendor client-address headers), `server.deny`, the access log
//! (docs/configuration/upstreams.md, docs/protocols.md, and the client
//! address of docs/configuration/limits.md).

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::client::{self, Proto};
use common::one_route::targets;
use common::{config, raw, ClosedPort, Echo, Gateway, OneRoute};
use http::{Method, Request};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_answer_504_upstream_timeout() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          slow: {{ targets: ["{e}"], timeout: 400ms, retries: 0 }}
          patient: {{ targets: ["{e}"], timeout: 10s, retries: 0 }}
        routes:
          - name: short
            match: {{ path: /r }}
            upstream: patient
            strip_prefix: true
            timeout: 300ms
          - name: up
            match: {{ path: /u }}
            upstream: slow
            strip_prefix: true
          - name: ok
            match: {{ path: / }}
            upstream: patient
        "#,
        e = echo.url()
    )))
    .await;
    let c = client::h1();
    let get = |path: &'static str| {
        let c = c.clone();
        let addr = gw.addr();
        async move {
            let start = Instant::now();
            let r = client::send(
                &c,
                client::req(Method::GET, addr, path)
                    .body(client::empty())
                    .unwrap(),
            )
            .await;
            (r, start.elapsed())
        }
    };
    // The route's timeout overrides the upstream's.
    let (r, took) = get("/r/delay/3000").await;
    r.assert_error(504, "upstream_timeout");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2000),
        "route timeout 300ms answered after {took:?}"
    );
    // The upstream's own timeout.
    let (r, took) = get("/u/delay/3000").await;
    r.assert_error(504, "upstream_timeout");
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_millis(2500),
        "upstream timeout 400ms answered after {took:?}"
    );
    // Under the timeouts, fine.
    let (r, _) = get("/r/delay/50").await;
    assert_eq!(r.status, 200);
    let (r, took) = get("/delay/1000").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took >= Duration::from_millis(1000));
    // h2c clients get the same.
    let r = client::get_h2c(gw.addr(), "/r/delay/3000").await;
    r.assert_error(504, "upstream_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_refused_or_reset_is_502_upstream_unavailable() {
    let echo = Echo::start("e").await;
    let closed = ClosedPort::bind();
    let dead = closed.addr();
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          dead: {{ targets: ["http://{dead}"], retries: 0, connect_timeout: 1s }}
          e: {{ targets: ["{}"], retries: 0 }}
        routes:
          - name: dead
            match: {{ path: /dead }}
            upstream: dead
          - name: all
            match: {{ path: / }}
            upstream: e
        "#,
        echo.url()
    )))
    .await;
    client::get(gw.addr(), "/dead")
        .await
        .assert_error(502, "upstream_unavailable");
    client::get_h2c(gw.addr(), "/dead/x")
        .await
        .assert_error(502, "upstream_unavailable");
    // The upstream drops the connection without answering.
    client::get(gw.addr(), "/close")
        .await
        .assert_error(502, "upstream_unavailable");
    // The gateway itself is fine.
    assert_eq!(client::get(gw.addr(), "/fine").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_health_ejection_gives_503_no_healthy_upstream() {
    let closed = ClosedPort::bind();
    let dead = closed.addr();
    let gw = OneRoute::new()
        .named("dead")
        .upstream_at("dead", &format!("[\"http://{dead}\"]"))
        .upstream_keys(
            r#"
            retries: 0
            health: { passive: { failures: 2, eject: 30s } }
            "#,
        )
        .start()
        .await;
    let c = client::h1();
    let get = || {
        client::send(
            &c,
            client::req(Method::GET, gw.addr(), "/")
                .body(client::empty())
                .unwrap(),
        )
    };
    get().await.assert_error(502, "upstream_unavailable");
    get().await.assert_error(502, "upstream_unavailable");
    get().await.assert_error(503, "no_healthy_upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_go_to_another_target_when_the_first_refuses() {
    let echo = Echo::start("e").await;
    let closed = ClosedPort::bind();
    let dead = closed.addr();
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("r", &format!("[\"http://{dead}\", \"{}\"]", echo.url()))
        .upstream_keys(
            r#"
            balance: round_robin
            retries: 1
            connect_timeout: 1s
            "#,
        )
        .start()
        .await;
    let c = client::h1();
    for i in 0..20 {
        let r = client::send(
            &c,
            client::req(Method::GET, gw.addr(), &format!("/get/{i}"))
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "GET {i}: {}", r.text());
    }
    // Nothing was sent to the refusing target, so even a POST is retried.
    for i in 0..6 {
        let r = client::send(
            &c,
            client::req(Method::POST, gw.addr(), &format!("/post/{i}"))
                .body(client::full(vec![b'x'; 1000]))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "POST {i}: {}", r.text());
        assert_eq!(r.json()["body_len"], 1000);
    }
    assert_eq!(echo.count(), 26);
}

/// How many of `n` requests each upstream answered.
async fn spread(gw: &Gateway, client: &client::HttpClient, n: usize) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for i in 0..n {
        let r = client::send(
            client,
            client::req(Method::GET, gw.addr(), &format!("/b/{i}"))
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        *seen.entry(r.upstream()).or_insert(0) += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_weights_are_exact() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at(
            "w",
            &format!(
                r#"[{{ url: "{}", weight: 2 }}, {{ url: "{}", weight: 1 }}]"#,
                a.url(),
                b.url()
            ),
        )
        .upstream_keys("balance: round_robin")
        .start()
        .await;
    let seen = spread(&gw, &client::h1(), 300).await;
    assert_eq!(seen.get("a"), Some(&200), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&100), "{seen:?}");
    assert_eq!((a.count(), b.count()), (200, 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_unweighted_is_even() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let c = Echo::start("c").await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("w", &targets(&[&a, &b, &c]))
        .start()
        .await;
    spread(&gw, &client::h2c(), 300).await;
    assert_eq!((a.count(), b.count(), c.count()), (100, 100, 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_balancing_is_stable_per_client() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("h", &targets(&[&a, &b]))
        .upstream_keys("balance: hash")
        .start()
        .await;
    let mut used = HashMap::new();
    for last in 10..30 {
        let source = ip(&format!("127.0.0.{last}"));
        // A fresh client (new connections) each round: stickiness must not
        // come from connection reuse.
        let mut chosen = None;
        for round in 0..5 {
            let c = client::h1_from(source);
            let r = client::send(
                &c,
                client::req(Method::GET, gw.addr(), &format!("/h/{round}"))
                    .body(client::empty())
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, 200);
            let up = r.upstream();
            match &chosen {
                None => chosen = Some(up),
                Some(c) => assert_eq!(c, &up, "client {source} moved between targets"),
            }
        }
        *used.entry(chosen.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        used.len(),
        2,
        "20 clients all hashed to one target: {used:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_requests_avoids_the_busy_target() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("l", &targets(&[&a, &b]))
        .upstream_keys("balance: least_requests")
        .start()
        .await;
    for round in 0..3 {
        let addr = gw.addr();
        let slow = tokio::spawn(async move { client::get(addr, "/delay/1500").await });
        common::eventually(
            Duration::from_secs(3),
            "the slow request in flight",
            || async { (a.in_flight() + b.in_flight() == 1).then_some(()) },
        )
        .await;
        let busy = if a.in_flight() == 1 { "a" } else { "b" };
        let c = client::h1();
        for i in 0..6 {
            let r = client::send(
                &c,
                client::req(Method::GET, gw.addr(), &format!("/fast/{i}"))
                    .body(client::empty())
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, 200);
            assert_ne!(
                r.upstream(),
                busy,
                "round {round}: request {i} went to the target with a request in flight"
            );
        }
        let r = slow.await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.upstream(), busy);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_balancing_spreads() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("r", &targets(&[&a, &b]))
        .upstream_keys("balance: random")
        .start()
        .await;
    spread(&gw, &client::h1(), 200).await;
    // Binomial(200, 0.5): below 50 has probability < 1e-12.
    assert_eq!(a.count() + b.count(), 200);
    assert!(
        a.count() >= 50 && b.count() >= 50,
        "random is not spreading: a={} b={}",
        a.count(),
        b.count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_headers_do_not_reach_the_upstream() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let mut c = raw::connect(gw.addr()).await;
    c.write(
        b"GET /hop-req HTTP/1.1\r\n\
          Host: gw.example\r\n\
          Connection: keep-alive, X-Private, x-other\r\n\
          X-Private: secret\r\n\
          X-Other: o\r\n\
          Keep-Alive: timeout=5\r\n\
          Proxy-Connection: keep-alive\r\n\
          TE: deflate\r\n\
          Trailer: x-foo\r\n\
          Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
          Upgrade: foo/1\r\n\
          X-Public: yes\r\n\
          \r\n",
    )
    .await
    .unwrap();
    let r = c.read_response(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    for h in [
        "keep-alive",
        "proxy-connection",
        "trailer",
        "proxy-authorization",
        "upgrade",
        "x-private",
        "x-other",
        "transfer-encoding",
    ] {
        assert!(
            !seen.has_header(h),
            "hop-by-hop header {h} reached the upstream: {:?}",
            seen.headers
        );
    }
    for v in seen.header_all("connection") {
        let v = v.to_ascii_lowercase();
        assert!(
            v == "keep-alive" || v == "close",
            "the client's Connection header reached the upstream: {v:?}"
        );
    }
    for v in seen.header_all("te") {
        assert_eq!(v, "trailers", "the client's TE reached the upstream");
    }
    assert_eq!(seen.header("x-public").as_deref(), Some("yes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_do_not_reach_the_client() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for proto in [Proto::H1, Proto::H2c] {
        let r = client::send_on_new_conn(
            gw.addr(),
            proto,
            Request::builder()
                .uri(format!("http://{}/hop", gw.addr()))
                .body(client::empty())
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{proto:?}");
        for h in [
            "x-resp-private",
            "keep-alive",
            "proxy-authenticate",
            "proxy-connection",
            "upgrade",
        ] {
            assert!(
                r.header(h).is_none(),
                "{proto:?}: hop-by-hop response header {h} reached the client: {:?}",
                r.headers
            );
        }
        if let Some(v) = r.header("connection") {
            assert!(!v.to_ascii_lowercase().contains("x-resp-private"), "{v}");
        }
        assert_eq!(r.header("x-resp-public"), Some("visible"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_are_set_and_forgeries_from_untrusted_peers_replaced() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let r = client::send_on_new_conn(
        gw.addr(),
        Proto::H1,
        Request::builder()
            .uri("/fwd")
            .header("host", "gw.example")
            .header("x-forwarded-for", "1.2.3.4")
            .header("x-forwarded-for", "5.6.7.8")
            .header("forwarded", "for=1.2.3.4;proto=https")
            .header("x-real-ip", "1.2.3.4")
            .header("x-forwarded-host", "evil.example")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-port", "443")
            .header("x-request-id", "forged-request-id")
            .body(client::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let seen = echo.last().unwrap();
    assert_eq!(
        seen.header_all("x-forwarded-for"),
        vec!["127.0.0.1".to_string()]
    );
    assert_eq!(
        seen.header_all("x-forwarded-proto"),
        vec!["http".to_string()]
    );
    assert_eq!(
        seen.header_all("x-forwarded-host"),
        vec!["gw.example".to_string()]
    );
    for v in seen.header_all("x-forwarded-port") {
        assert_ne!(v, "443", "a forged X-Forwarded-Port reached the upstream");
    }
    for v in seen.header_all("forwarded") {
        assert!(
            !v.contains("1.2.3.4"),
            "forged Forwarded reached the upstream: {v}"
        );
    }
    for v in seen.header_all("x-real-ip") {
        assert_eq!(v, "127.0.0.1", "forged X-Real-IP reached the upstream");
    }
    let rid = r.header("x-request-id").expect("x-request-id").to_string();
    assert_ne!(
        rid, "forged-request-id",
        "request id from an untrusted peer kept"
    );
    assert_eq!(seen.header_all("x-request-id"), vec![rid.clone()]);
    let log = gw.wait_access_log("/fwd", |l| l["path"] == "/fwd").await;
    assert_eq!(log["client"], "127.0.0.1", "{log}");
    assert_eq!(log["request_id"], rid.as_str());
}

/// One upstream `e`, a catch-all route to it, and `127.0.0.2` a trusted
/// proxy.
async fn behind_a_trusted_proxy(echo: &Echo) -> Gateway {
    OneRoute::new()
        .named("all")
        .upstream(echo)
        .server(r#"trusted_proxies: ["127.0.0.2/32"]"#)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxy_chain_is_extended_and_client_is_rightmost_untrusted() {
    let echo = Echo::start("e").await;
    let gw = behind_a_trusted_proxy(&echo).await;
    let cases: [(&str, &str, Option<&str>, &str, &str); 4] = [
        // (source, path, incoming XFF, XFF the upstream sees, client)
        (
            "127.0.0.2",
            "/t/a",
            Some("198.51.100.1, 203.0.113.7"),
            "198.51.100.1, 203.0.113.7, 127.0.0.2",
            "203.0.113.7",
        ),
        (
            "127.0.0.2",
            "/t/b",
            Some("203.0.113.9, 127.0.0.2"),
            "203.0.113.9, 127.0.0.2, 127.0.0.2",
            "203.0.113.9",
        ),
        ("127.0.0.2", "/t/c", None, "127.0.0.2", "127.0.0.2"),
        (
            "127.0.0.3",
            "/t/d",
            Some("203.0.113.50"),
            "127.0.0.3",
            "127.0.0.3",
        ),
    ];
    for (source, path, xff, want_xff, want_client) in cases {
        let c = client::h1_from(ip(source));
        let mut b = client::req(Method::GET, gw.addr(), path)
            .header("x-request-id", format!("rid-{}", &path[3..]));
        if let Some(x) = xff {
            b = b.header("x-forwarded-for", x);
        }
        let r = client::send(&c, b.body(client::empty()).unwrap()).await;
        assert_eq!(r.status, 200);
        let seen = echo.last().unwrap();
        let got: Vec<String> = seen
            .header_all("x-forwarded-for")
            .iter()
            .flat_map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want: Vec<String> = want_xff.split(", ").map(String::from).collect();
        assert_eq!(got, want, "{path} from {source}: X-Forwarded-For");
        let log = gw.wait_access_log(path, |l| l["path"] == path).await;
        assert_eq!(log["client"], want_client, "{path} from {source}: {log}");
        let rid = seen.header("x-request-id");
        if source == "127.0.0.2" {
            assert_eq!(
                rid.as_deref(),
                Some(format!("rid-{}", &path[3..]).as_str()),
                "X-Request-Id from a trusted peer is kept"
            );
        } else {
            assert_ne!(rid.as_deref(), Some(format!("rid-{}", &path[3..]).as_str()));
        }
    }
}

// Identity headers beyond X-Forwarded-* (docs/protocols.md): from an untrusted peer
// the underscore spellings of the managed headers and the vendor
// client-address headers are dropped, over HTTP/1.1 as written on the wire
// and HTTP/2; a trusted peer's pass. A forwarded chain with empty elements
// is forwarded without empty members, and the client read from the same
// elements.

/// Every name docs/protocols.md has an untrusted peer's request lose, as a client
/// might spell it.
const SPOOFS: [&str; 21] = [
    "X_Forwarded_For",
    "X-Forwarded_For",
    "x_forwarded_proto",
    "X_Forwarded_Host",
    "X_Forwarded_Port",
    "X-Real_IP",
    "X_Real_Ip",
    "X_Request_Id",
    "True-Client-IP",
    "True_Client_IP",
    "CF-Connecting-IP",
    "CF_Connecting_IP",
    "X-Client-IP",
    "X_Client_IP",
    "X-Cluster-Client-IP",
    "Fastly-Client-IP",
    "X-Originating-IP",
    "Client-IP",
    "Client_IP",
    "X-Forwarded",
    "Forwarded-For",
];

/// A forged address no upstream may see.
const FORGED: &str = "6.6.6.6";

/// Whether `name` (as the upstream saw it) is one of [`SPOOFS`].
fn spoofed(name: &str) -> bool {
    SPOOFS.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// The request's spoofs must be gone; what the gateway sets is the peer's.
fn assert_clean(echo: &Echo, how: &str) {
    let seen = echo.last().expect("the request reached the upstream");
    for (name, value) in &seen.headers {
        assert!(
            !spoofed(name) && !value.contains(FORGED),
            "{how}: `{name}: {value}` reached the upstream: {:?}",
            seen.headers
        );
    }
    assert_eq!(seen.header_all("x-forwarded-for"), ["127.0.0.1"], "{how}");
    assert_eq!(seen.header("x-near-miss").as_deref(), Some("kept"), "{how}");
    assert_eq!(seen.header("x_custom").as_deref(), Some("kept"), "{how}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_peers_lose_underscore_and_vendor_identity_headers() {
    let echo = Echo::start("e").await;
    let gw = behind_a_trusted_proxy(&echo).await;

    // On the wire, in the client's own spelling.
    let mut head = String::from("GET /wire HTTP/1.1\r\nHost: gw.example\r\n");
    for name in SPOOFS {
        head.push_str(&format!("{name}: {FORGED}\r\n"));
    }
    head.push_str("X-Near-Miss: kept\r\nX_Custom: kept\r\nConnection: close\r\n\r\n");
    let r = raw::request(gw.addr(), head.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_clean(&echo, "HTTP/1.1 on the wire");

    for proto in [Proto::H1, Proto::H2c] {
        let mut b = Request::builder()
            .uri(format!("http://gw.example/{proto:?}"))
            .header("x-near-miss", "kept")
            .header("x_custom", "kept");
        for name in SPOOFS {
            b = b.header(name, FORGED);
        }
        let r = client::send_on_new_conn(gw.addr(), proto, b.body(client::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{proto:?}");
        assert_clean(&echo, &format!("{proto:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_peers_keep_them_and_chains_lose_empty_elements() {
    let echo = Echo::start("e").await;
    let gw = behind_a_trusted_proxy(&echo).await;
    let trusted = client::h1_from(ip("127.0.0.2"));

    // A trusted proxy's vendor and underscore headers pass as they are.
    let mut b = client::req(Method::GET, gw.addr(), "/vendor");
    for name in SPOOFS {
        b = b.header(name, "198.51.100.7");
    }
    let r = client::send(&trusted, b.body(client::empty()).unwrap()).await;
    assert_eq!(r.status, 200);
    let seen = echo.last().unwrap();
    for name in SPOOFS {
        assert_eq!(seen.header_all(name), ["198.51.100.7"], "{name}");
    }

    // (incoming X-Forwarded-For fields, what the upstream sees, the client)
    let cases: [(&[&str], &str, &str); 5] = [
        (&["203.0.113.9, "], "203.0.113.9, 127.0.0.2", "203.0.113.9"),
        (&["203.0.113.9,"], "203.0.113.9, 127.0.0.2", "203.0.113.9"),
        (
            &["198.51.100.1,,203.0.113.7"],
            "198.51.100.1, 203.0.113.7, 127.0.0.2",
            "203.0.113.7",
        ),
        (
            &[", 198.51.100.1 , ,", "203.0.113.8,"],
            "198.51.100.1, 203.0.113.8, 127.0.0.2",
            "203.0.113.8",
        ),
        (&[" , "], "127.0.0.2", "127.0.0.2"),
    ];
    for (i, (fields, want_xff, want_client)) in cases.into_iter().enumerate() {
        let path = format!("/chain/{i}");
        let mut b = client::req(Method::GET, gw.addr(), &path);
        for f in fields {
            b = b.header("x-forwarded-for", *f);
        }
        let r = client::send(&trusted, b.body(client::empty()).unwrap()).await;
        assert_eq!(r.status, 200, "{fields:?}");
        let seen = echo.last().unwrap();
        assert_eq!(seen.header_all("x-forwarded-for"), [want_xff], "{fields:?}");
        let log = gw.wait_access_log(&path, |l| l["path"] == path).await;
        assert_eq!(log["client"], want_client, "{fields:?}: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_answers_403_before_any_route() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("e")
        .matching("{ path: /e }")
        .upstream(&echo)
        .route(r#"{ name: hello, match: { exact: /hello }, respond: { status: 200, body: "hi" } }"#)
        .server(r#"deny: ["127.0.0.3/32", "10.0.0.0/8"]"#)
        .start()
        .await;
    let denied = client::h1_from(ip("127.0.0.3"));
    for path in ["/e/x", "/hello", "/no/such/route"] {
        let r = client::send(
            &denied,
            client::req(Method::GET, gw.addr(), path)
                .body(client::empty())
                .unwrap(),
        )
        .await;
        r.assert_error(403, "forbidden");
    }
    assert_eq!(echo.count(), 0, "a denied client reached the upstream");
    let allowed = client::h1_from(ip("127.0.0.4"));
    let r = client::send(
        &allowed,
        client::req(Method::GET, gw.addr(), "/e/x")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_applies_to_the_client_behind_a_trusted_proxy() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("e")
        .upstream(&echo)
        .server(
            r#"
            trusted_proxies: ["127.0.0.2/32"]
            deny: ["203.0.113.0/24"]
            "#,
        )
        .start()
        .await;
    let proxy = client::h1_from(ip("127.0.0.2"));
    let send = |xff: &'static str| {
        client::send(
            &proxy,
            client::req(Method::GET, gw.addr(), "/x")
                .header("x-forwarded-for", xff)
                .body(client::empty())
                .unwrap(),
        )
    };
    send("203.0.113.5").await.assert_error(403, "forbidden");
    assert_eq!(send("198.51.100.5").await.status, 200);
    // From an untrusted peer the header is not believed: not denied.
    let direct = client::h1_from(ip("127.0.0.5"));
    let r = client::send(
        &direct,
        client::req(Method::GET, gw.addr(), "/x")
            .header("x-forwarded-for", "203.0.113.5")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_line_has_the_contract_fields() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let r = client::get_host(gw.addr(), "logs.example", "/logged/path?q=1").await;
    assert_eq!(r.status, 200);
    let rid = r.header("x-request-id").unwrap().to_string();
    let log = gw
        .wait_access_log("the request", |l| l["request_id"] == rid.as_str())
        .await;
    assert_eq!(log["client"], "127.0.0.1", "{log}");
    assert_eq!(log["method"], "GET", "{log}");
    assert_eq!(log["host"], "logs.example", "{log}");
    assert!(
        log["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/logged/path")),
        "{log}"
    );
    assert_eq!(log["route"], "all", "{log}");
    assert!(
        log["upstream"]
            .as_str()
            .is_some_and(|u| u.contains(&echo.addr().to_string())),
        "upstream should name the target {}: {log}",
        echo.addr()
    );
    assert_eq!(log["status"], 200, "{log}");
    assert!(log["duration_ms"].is_number(), "{log}");
    assert!(log["bytes"].is_number(), "{log}");
    // A rejected request is logged too.
    let r = raw::get(gw.addr(), "/../x").await;
    let rid = r.header("x-request-id").unwrap_or_default().to_string();
    let log = gw
        .wait_access_log("the 400", |l| l["request_id"] == rid.as_str())
        .await;
    assert_eq!(log["status"], 400, "{log}");
}

// ---- The upstream connection pool (src/proxy/client.rs) ----

/// A raw connection that asked for a 200 MB download, once the echo (which
/// must have had no request yet) has the request; nothing reads the answer.
async fn unread_download(gw: &Gateway, echo: &Echo) -> raw::RawConn {
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(b"GET /download/200000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    common::eventually(Duration::from_secs(5), "the download to start", || async {
        (echo.count() == 1).then_some(())
    })
    .await;
    conn
}

/// Distinct upstream connections the echo's requests came on.
fn connections_used(echo: &Echo) -> usize {
    echo.requests()
        .iter()
        .map(|r| r.peer)
        .collect::<std::collections::HashSet<_>>()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_connection_serves_sequential_requests() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start_workers(1).await;
    let h1 = client::h1();
    let h2c = client::h2c();
    for i in 0..5 {
        // Every kind of response body, each read to its end.
        let r = client::get(gw.addr(), &format!("/plain?i={i}")).await;
        assert_eq!(r.status, 200);
        let r = client::send(
            &h1,
            client::req(Method::HEAD, gw.addr(), "/head")
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(client::get(gw.addr(), "/status/204").await.status, 204);
        let r = client::get(gw.addr(), "/download/300000").await;
        assert_eq!(r.body.len(), 300_000);
        let r = client::send(
            &h1,
            client::req(Method::POST, gw.addr(), "/upload")
                .body(client::full("abc"))
                .unwrap(),
        )
        .await;
        assert_eq!(r.json()["len"], 3);
        // h2c from the client: the upstream sends chunked with trailers.
        let r = client::send(
            &h2c,
            client::req(Method::GET, gw.addr(), "/trailers")
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert!(r.trailers.is_some(), "trailers: {r:?}");
    }
    assert_eq!(echo.count(), 30);
    assert_eq!(echo.connections(), 1, "one keep-alive connection upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_worker_thread_keeps_at_most_one_idle_upstream_connection_for_sequential_requests() {
    // Two worker threads, each with its own idle list: 40 sequential
    // requests, each on a fresh client connection that the kernel hands to
    // either thread, open at most one upstream connection per thread.
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start_workers(2).await;
    for i in 0..40 {
        let r = client::get(gw.addr(), &format!("/plain?i={i}")).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(echo.count(), 40);
    let n = echo.connections();
    assert!(
        (1..=2).contains(&n),
        "{n} upstream connections for 2 threads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_do_not_wait_behind_a_slow_response_body() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start_workers(1).await;
    // A large response nobody reads: its upstream connection stays busy.
    let stalled = unread_download(&gw, &echo).await;
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(client::get(gw.addr(), "/").await.status, 200);
    }
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(echo.connections(), 2, "one busy, one for the rest");
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_dropped_response_does_not_return_its_connection() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start_workers(1).await;
    drop(unread_download(&gw, &echo).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        assert_eq!(client::get(gw.addr(), "/").await.status, 200);
    }
    let peers: Vec<_> = echo.requests().iter().map(|r| r.peer).collect();
    assert!(
        peers[1..].iter().all(|p| *p != peers[0]),
        "the download's connection was used again: {peers:?}"
    );
    assert_eq!(connections_used(&echo), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_the_upstream_closed_are_replaced_transparently() {
    // Idle connections dropped by the upstream (no `Connection: close`):
    // the next request, a POST that is never retried, still goes through.
    // (The race where the upstream closes just as a request is handed to the
    // connection is covered in src/proxy/client.rs.)
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let c = client::h1();
    for i in 0..5 {
        let r = client::send(
            &c,
            client::req(Method::POST, gw.addr(), &format!("/p{i}"))
                .body(client::full("x"))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        echo.drop_connections();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(echo.count(), 5);
    assert_eq!(echo.connections(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_upstream_connection_is_shared_and_reopened() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .upstream_keys("http2: true")
        .start()
        .await;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let addr = gw.addr();
        clients.spawn(async move { client::get(addr, "/delay/300").await });
    }
    while let Some(r) = clients.join_next().await {
        let r = r.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["http_version"], "HTTP/2");
    }
    assert_eq!(echo.connections(), 1, "one multiplexed connection");
    // The upstream drops it: the next request opens another.
    echo.drop_connections();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        assert_eq!(client::get(gw.addr(), "/").await.status, 200);
    }
    assert_eq!(echo.connections(), 2);
}
