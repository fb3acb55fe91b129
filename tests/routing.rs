//! Routing: every matcher, the path normaliser end to end, `respond` routes,
//! `strip_prefix`, `preserve_host`, h2c clients, the 404 and request ids
//! (docs/configuration/routes.md, docs/protocols.md).

mod common;

use std::collections::HashSet;

use common::client::{self, Proto};
use common::{config, raw, Echo, Gateway, OneRoute};
use http::{Method, Request};

/// A gateway whose routes answer by themselves with their name as the body.
async fn respond_gateway(routes: &[(&str, &str)]) -> Gateway {
    let mut yaml = String::from("routes:\n");
    for (name, m) in routes {
        yaml.push_str(&format!(
            "  - name: {name}\n    match: {m}\n    respond: {{ status: 200, body: \"{name}\" }}\n"
        ));
    }
    Gateway::start(&config(&yaml)).await
}

async fn route_for_host(gw: &Gateway, host: &str, path: &str) -> String {
    let r = client::get_host(gw.addr(), host, path).await;
    assert_eq!(r.status, 200, "Host {host}: {} {}", r.status, r.text());
    r.text()
}

async fn route_for(gw: &Gateway, path: &str) -> String {
    let r = client::get(gw.addr(), path).await;
    assert_eq!(r.status, 200, "GET {path}: {} {}", r.status, r.text());
    r.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_exact_wildcard_case_insensitive_port_ignored() {
    let gw = respond_gateway(&[
        ("exact", r#"{ hosts: ["api.example.com"] }"#),
        ("wild", r#"{ hosts: ["*.example.com"] }"#),
        ("other", "{ path: / }"),
    ])
    .await;
    for (host, want) in [
        ("api.example.com", "exact"),
        ("API.Example.COM", "exact"),
        ("api.example.com:8080", "exact"),
        ("a.example.com", "wild"),
        ("x.y.example.com", "wild"),
        ("A.EXAMPLE.COM:1", "wild"),
        ("example.com", "other"),
        ("notexample.com", "other"),
        ("api.example.com.evil.net", "other"),
        ("127.0.0.1", "other"),
    ] {
        assert_eq!(route_for_host(&gw, host, "/x").await, want, "Host: {host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_match_h2_authority() {
    let gw = respond_gateway(&[
        ("exact", r#"{ hosts: ["api.example.com"] }"#),
        ("wild", r#"{ hosts: ["*.example.com"] }"#),
        ("other", "{ path: / }"),
    ])
    .await;
    for (authority, want) in [
        ("API.example.com:443", "exact"),
        ("api.example.com", "exact"),
        ("b.example.com:9", "wild"),
        ("example.org", "other"),
    ] {
        let r = client::get_authority_h2c(gw.addr(), authority, "/x").await;
        assert_eq!(r.status, 200, ":authority {authority}: {}", r.text());
        assert_eq!(r.version, http::Version::HTTP_2);
        assert_eq!(r.text(), want, ":authority {authority}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_prefix_on_segment_boundary_and_case_sensitive() {
    let gw = respond_gateway(&[("users", "{ path: /users }"), ("root", "{ path: / }")]).await;
    for (path, want) in [
        ("/users", "users"),
        ("/users/", "users"),
        ("/users/7", "users"),
        ("/users/7/orders?x=1", "users"),
        ("/users?x=1", "users"),
        ("/usersx", "root"),
        ("/user", "root"),
        ("/Users", "root"),
        ("/", "root"),
        ("/anything/else", "root"),
    ] {
        assert_eq!(route_for(&gw, path).await, want, "path {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_and_regex_paths() {
    let gw = respond_gateway(&[
        ("login", "{ exact: /login }"),
        ("items", r#"{ regex: "^/v[0-9]+/items$" }"#),
        ("fallback", "{ path: / }"),
    ])
    .await;
    for (path, want) in [
        ("/login", "login"),
        ("/login?next=/x", "login"),
        ("/login/", "fallback"),
        ("/login/x", "fallback"),
        ("/loginx", "fallback"),
        ("/v1/items", "items"),
        ("/v22/items?page=2", "items"),
        ("/v1/items/3", "fallback"),
        ("/vx/items", "fallback"),
        ("/x/v1/items", "fallback"),
    ] {
        assert_eq!(route_for(&gw, path).await, want, "path {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_matcher() {
    let gw = respond_gateway(&[
        ("post", "{ path: /m, methods: [POST] }"),
        ("read", "{ path: /m, methods: [GET, HEAD] }"),
        ("fallback", "{ path: / }"),
    ])
    .await;
    let c = client::h1();
    for (method, want) in [
        (Method::POST, "post"),
        (Method::GET, "read"),
        (Method::DELETE, "fallback"),
        (Method::PUT, "fallback"),
    ] {
        let r = client::send(
            &c,
            client::req(method.clone(), gw.addr(), "/m")
                .body(client::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200, "{method}");
        assert_eq!(r.text(), want, "{method} /m");
    }
    // HEAD goes to "read" too (no body on a HEAD answer).
    let r = client::send(
        &c,
        client::req(Method::HEAD, gw.addr(), "/m")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_matcher_exact_and_present() {
    let gw = respond_gateway(&[
        ("v2", r#"{ path: /h, headers: { x-version: "2" } }"#),
        ("beta", r#"{ path: /h, headers: { x-beta: "*" } }"#),
        ("fallback", "{ path: / }"),
    ])
    .await;
    for (headers, want) in [
        (vec![("x-version", "2")], "v2"),
        (vec![("X-Version", "2")], "v2"),
        (vec![("x-version", "3")], "fallback"),
        (vec![("x-version", "20")], "fallback"),
        (vec![("x-beta", "anything")], "beta"),
        (vec![("x-version", "3"), ("x-beta", "1")], "beta"),
        (vec![("x-version", "2"), ("x-beta", "1")], "v2"),
        (vec![], "fallback"),
    ] {
        let r = client::get_with(gw.addr(), "/h", &headers).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), want, "headers {headers:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_matching_route_in_file_order_wins() {
    let gw = respond_gateway(&[
        ("first", "{ path: /dup }"),
        ("second", "{ path: /dup/more }"),
        ("third", "{ exact: /dup }"),
        ("hosted", r#"{ hosts: ["h.example"], path: /dup }"#),
    ])
    .await;
    assert_eq!(route_for(&gw, "/dup").await, "first");
    assert_eq!(route_for(&gw, "/dup/more").await, "first");
    assert_eq!(route_for_host(&gw, "h.example", "/dup").await, "first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_matchers_must_hold() {
    let gw = respond_gateway(&[
        (
            "all",
            r#"{ hosts: ["a.example"], path: /x, methods: [GET], headers: { x-k: "v" } }"#,
        ),
        ("fallback", "{ path: / }"),
    ])
    .await;
    let send =
        |host: &'static str, method: Method, path: &'static str, hv: Option<&'static str>| {
            let mut b = Request::builder()
                .method(method)
                .uri(path)
                .header("host", host);
            if let Some(v) = hv {
                b = b.header("x-k", v);
            }
            let addr = gw.addr();
            async move {
                client::send_on_new_conn(addr, Proto::H1, b.body(client::empty()).unwrap())
                    .await
                    .unwrap()
                    .text()
            }
        };
    assert_eq!(send("a.example", Method::GET, "/x", Some("v")).await, "all");
    assert_eq!(
        send("b.example", Method::GET, "/x", Some("v")).await,
        "fallback"
    );
    assert_eq!(
        send("a.example", Method::POST, "/x", Some("v")).await,
        "fallback"
    );
    assert_eq!(
        send("a.example", Method::GET, "/y", Some("v")).await,
        "fallback"
    );
    assert_eq!(
        send("a.example", Method::GET, "/x", Some("w")).await,
        "fallback"
    );
    assert_eq!(send("a.example", Method::GET, "/x", None).await, "fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_no_route_json() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("only")
        .matching("{ exact: /only }")
        .upstream(&echo)
        .start()
        .await;
    let r = client::get(gw.addr(), "/nothing").await;
    r.assert_error(404, "no_route");
    assert_eq!(
        r.header("content-type")
            .map(|v| v.starts_with("application/json")),
        Some(true),
        "content-type of the error: {:?}",
        r.headers
    );
    let r = client::get_h2c(gw.addr(), "/only/not").await;
    r.assert_error(404, "no_route");
    let r = client::send(
        &client::h1(),
        client::req(Method::POST, gw.addr(), "/x")
            .body(client::full("data"))
            .unwrap(),
    )
    .await;
    r.assert_error(404, "no_route");
    assert_eq!(echo.count(), 0, "a 404 must not reach any upstream");
    assert_eq!(client::get(gw.addr(), "/only").await.status, 200);
    assert_eq!(echo.count(), 1);
}

/// Three upstreams so the answer says which route was taken.
async fn normaliser_gateway() -> (Gateway, Echo, Echo, Echo) {
    let ab = Echo::start("ab").await;
    let api = Echo::start("api").await;
    let rest = Echo::start("rest").await;
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          ab: {{ targets: ["{}"] }}
          api: {{ targets: ["{}"] }}
          rest: {{ targets: ["{}"] }}
        routes:
          - name: secret
            match: {{ path: /secret }}
            respond: {{ status: 401, body: "protected" }}
          - name: ab
            match: {{ exact: /a/b }}
            upstream: ab
          - name: api
            match: {{ path: /api }}
            upstream: api
          - name: rest
            match: {{ path: / }}
            upstream: rest
        "#,
        ab.url(),
        api.url(),
        rest.url()
    )))
    .await;
    (gw, ab, api, rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normaliser_resolves_dots_slashes_and_unreserved_escapes() {
    let (gw, _ab, _api, _rest) = normaliser_gateway().await;
    for (target, upstream, path) in [
        ("/a/./b", "ab", "/a/b"),
        ("/a/x/../b", "ab", "/a/b"),
        // RFC 3986 keeps the trailing slash, and `exact: /a/b` does not match `/a/b/`.
        ("/a/b/.", "rest", "/a/b/"),
        ("//a//b", "ab", "/a/b"),
        ("/./a/./b", "ab", "/a/b"),
        ("/%61/b", "ab", "/a/b"),
        ("/a/../b", "rest", "/b"),
        ("/%61pi", "api", "/api"),
        ("/%61%70%69/v1", "api", "/api/v1"),
        ("/api/%7Euser", "api", "/api/~user"),
        ("/api/%2D%2E%5F", "api", "/api/-._"),
        ("/api/x/../../api/y", "api", "/api/y"),
        ("/a/./b?q=%61&r=/../x", "ab", "/a/b?q=%61&r=/../x"),
        ("/API", "rest", "/API"),
    ] {
        let r = raw::get(gw.addr(), target).await;
        assert_eq!(r.status, 200, "{target}: {} {}", r.status_line, r.text());
        assert_eq!(
            r.header("x-upstream"),
            Some(upstream),
            "{target} reached the wrong route"
        );
        assert_eq!(
            r.json()["path"],
            path,
            "{target}: the upstream must see the normalised path"
        );
    }
}

/// `escaped_slashes` is `reject` by default: an encoded slash or backslash
/// is a 400 (`tests/path_parity.rs` covers `decode` and `keep`); other
/// escapes are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normaliser_rejects_encoded_slash_and_backslash_by_default() {
    let (gw, ab, api, rest) = normaliser_gateway().await;
    for target in [
        "/api/a%2Fb",
        "/api/a%5Cb",
        "/api%2fx",
        "/a%2Fb",
        "/api/a\\b",
    ] {
        let r = raw::get(gw.addr(), target).await;
        raw::assert_error(&r, 400, "bad_request");
    }
    assert_eq!(ab.count() + api.count() + rest.count(), 0);
    let r = raw::get(gw.addr(), "/api/%20x%3f").await;
    assert_eq!(r.status, 200, "{} {}", r.status_line, r.text());
    assert_eq!(r.header("x-upstream"), Some("api"));
    assert_eq!(r.json()["path"], "/api/%20x%3F");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normaliser_rejects_escapes_above_root_bad_percent_and_non_origin_form() {
    let (gw, ab, api, rest) = normaliser_gateway().await;
    for target in [
        "/../x",
        "/a/../../x",
        "/api/../../etc/passwd",
        "/%2e%2e/x",
        "/%zz",
        "/%4",
        "/a%2",
        "/api/%G0",
        "http://test.local/a/b",
        "*",
    ] {
        let r = raw::get(gw.addr(), target).await;
        raw::assert_error(&r, 400, "bad_request");
        let _ = target;
    }
    assert_eq!(
        ab.count() + api.count() + rest.count(),
        0,
        "a rejected request must not reach an upstream"
    );
    // OPTIONS * is the one non-origin form that is allowed.
    let r = raw::request(
        gw.addr(),
        b"OPTIONS * HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_ne!(r.status, 400, "OPTIONS * must not be a 400: {}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_protected_path_skips_its_route() {
    let (gw, ab, api, rest) = normaliser_gateway().await;
    for target in [
        "/secret",
        "/secret/",
        "/secret/x",
        "/%73ecret",
        "/%73%65%63%72%65%74/x",
        "//secret",
        "///secret//x",
        "/x/../secret",
        "/./secret",
        "/api/../secret",
        "/secret/./x",
        "/secret?x=/../api",
    ] {
        let r = raw::get(gw.addr(), target).await;
        assert_eq!(
            r.status,
            401,
            "{target} skipped the protected route: {} {}",
            r.status_line,
            r.text()
        );
        assert_eq!(r.text(), "protected", "{target}");
    }
    assert_eq!(ab.count() + api.count() + rest.count(), 0);
    // Paths are case-sensitive: /SECRET is another path.
    let r = raw::get(gw.addr(), "/SECRET").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-upstream"), Some("rest"));
    assert_eq!(r.json()["path"], "/SECRET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_routes_status_body_headers() {
    let gw = Gateway::start(&config(
        r#"
        routes:
          - name: made
            match: { exact: /made }
            respond: { status: 201, body: "made\n", headers: { content-type: text/plain, x-demo: "1" } }
          - name: empty
            match: { exact: /empty }
            respond: { status: 204 }
          - name: teapot
            match: { exact: /teapot }
            respond: { status: 418, body: "short and stout" }
        "#,
    ))
    .await;
    for r in [
        client::get(gw.addr(), "/made").await,
        client::get_h2c(gw.addr(), "/made").await,
    ] {
        assert_eq!(r.status, 201);
        assert_eq!(r.text(), "made\n");
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x-demo"), Some("1"));
        assert!(r.header("x-request-id").is_some_and(|v| !v.is_empty()));
    }
    let r = client::get(gw.addr(), "/empty").await;
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    assert!(r.header("x-request-id").is_some());
    let r = client::get(gw.addr(), "/teapot").await;
    assert_eq!(r.status, 418);
    assert_eq!(r.text(), "short and stout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_prefix_keeps_query_and_empty_becomes_root() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("svc")
        .matching("{ path: /svc }")
        .upstream(&echo)
        .route_keys("strip_prefix: true")
        .route("{ name: deep, match: { path: /deep/er }, upstream: e, strip_prefix: true }")
        .route("{ name: keep, match: { path: /keep }, upstream: e }")
        .start()
        .await;
    for (target, want) in [
        ("/svc/users?q=1&x=%2F", "/users?q=1&x=%2F"),
        ("/svc", "/"),
        ("/svc/", "/"),
        ("/svc?only=query", "/?only=query"),
        ("/svc/a/../b", "/b"),
        ("/svc/svc/x", "/svc/x"),
        ("/deep/er/x/y", "/x/y"),
        ("/deep/er", "/"),
        ("/keep/x?y=1", "/keep/x?y=1"),
    ] {
        let r = raw::get(gw.addr(), target).await;
        assert_eq!(r.status, 200, "{target}: {}", r.text());
        assert_eq!(r.json()["path"], want, "{target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_host_true_false_and_default() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("keep")
        .matching("{ path: /p }")
        .upstream(&echo)
        .route_keys("preserve_host: true")
        .route("{ name: replace, match: { path: /np }, upstream: e, preserve_host: false }")
        .route("{ name: default, match: { path: / }, upstream: e }")
        .start()
        .await;
    let host = "client.example:8000";
    client::get_host(gw.addr(), host, "/p").await;
    assert_eq!(echo.last().unwrap().host.as_deref(), Some(host));
    client::get_host(gw.addr(), host, "/np").await;
    assert_eq!(
        echo.last().unwrap().host,
        Some(echo.addr().to_string()),
        "preserve_host: false sends the target's authority"
    );
    client::get_host(gw.addr(), host, "/d").await;
    assert_eq!(
        echo.last().unwrap().host.as_deref(),
        Some(host),
        "preserve_host defaults to true"
    );
    // h2 :authority is the client's Host too.
    client::get_authority_h2c(gw.addr(), "h2.example", "/p").await;
    assert_eq!(echo.last().unwrap().host.as_deref(), Some("h2.example"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_clients_are_proxied() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("all").upstream(&echo).start().await;
    let c = client::h2c();
    let r = client::send(
        &c,
        client::req(Method::POST, gw.addr(), "/h2/post?x=1")
            .header("x-custom", "yes")
            .body(client::full(vec![7u8; 100_000]))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.version, http::Version::HTTP_2);
    let v = r.json();
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/h2/post?x=1");
    assert_eq!(v["body_len"], 100_000);
    assert_eq!(
        echo.last().unwrap().header("x-custom").as_deref(),
        Some("yes")
    );

    // Many concurrent streams on one connection.
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let c = c.clone();
        let addr = gw.addr();
        tasks.push(tokio::spawn(async move {
            client::send(
                &c,
                client::req(Method::GET, addr, &format!("/delay/300?i={i}"))
                    .body(client::empty())
                    .unwrap(),
            )
            .await
        }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
    }
    assert!(
        start.elapsed() < std::time::Duration::from_millis(2500),
        "20 concurrent h2 streams of 300 ms took {:?}: not multiplexed",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_has_a_unique_request_id_which_the_upstream_sees() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("all")
        .matching("{ path: /e }")
        .upstream(&echo)
        .route(r#"{ name: hello, match: { exact: /hello }, respond: { status: 200, body: "hi" } }"#)
        .start()
        .await;
    let mut ids = HashSet::new();
    let c = client::h1();
    for i in 0..30 {
        let path = match i % 3 {
            0 => "/hello",
            1 => "/e/x",
            _ => "/nope",
        };
        let r = client::send(
            &c,
            client::req(Method::GET, gw.addr(), path)
                .body(client::empty())
                .unwrap(),
        )
        .await;
        let id = r
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{path}: no x-request-id ({})", r.status))
            .to_string();
        assert!(!id.is_empty());
        if path == "/e/x" {
            assert_eq!(
                echo.last().unwrap().header("x-request-id"),
                Some(id.clone()),
                "the upstream must see the same X-Request-Id as the client"
            );
        }
        assert!(ids.insert(id.clone()), "request id {id} repeated");
    }
}
