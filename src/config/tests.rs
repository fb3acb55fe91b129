//! End-to-end tests of `parse`: the full example config, defaults, naming, and one
//! test per kind of error, each pinning the field path and line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderName, Method, StatusCode};
use tollgate_limit::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, token_bucket, Micros,
};

use super::*;

/// A duration in microseconds, as the validated parameters hold them.
fn us(d: Duration) -> Micros {
    d.as_micros() as Micros
}

/// A validated rate.
fn rate(count: u64, period: Duration) -> tollgate_limit::algorithm::Rate {
    tollgate_limit::algorithm::Rate::new(count, us(period)).unwrap()
}

const SPEC_EXAMPLE: &str = include_str!("../../tests/fixtures/config/spec_example.yaml");

fn env(name: &str) -> Option<String> {
    match name {
        "LIMIT" => Some("7".into()),
        "ADMIN_TOKEN" => Some("s3cret".into()),
        "REDIS_HOST" => Some("cache.internal".into()),
        _ => None,
    }
}

fn ok(text: &str) -> Loaded {
    match parse_with_env(text, "gateway.yaml", &env) {
        Ok(loaded) => loaded,
        Err(err) => panic!("expected a valid config, got: {err}"),
    }
}

fn err(text: &str) -> ConfigError {
    match parse_with_env(text, "gateway.yaml", &env) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(err) => err,
    }
}

/// Asserts the error's field path and line, and returns the error.
fn err_at(text: &str, field: &str, line: usize) -> ConfigError {
    let e = err(text);
    assert_eq!(e.field, field, "field of: {e}");
    assert_eq!(e.line, Some(line), "line of: {e}");
    assert!(e.column.is_some(), "column of: {e}");
    e
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A valid base: one upstream, one policy; tests append routes.
const BASE: &str = "\
upstreams:
  users:
    targets: [\"http://127.0.0.1:9001\"]
limits:
  per_client:
    algorithm: token_bucket
    rate: 10/s
routes:
";

// ----- the full example config -----

/// `text` without the line `line` (1-based) and the block under it.
fn without_block(text: &str, line: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let top = indent(lines[line - 1]);
    let mut end = line;
    while end < lines.len() && (lines[end].trim().is_empty() || indent(lines[end]) > top) {
        end += 1;
    }
    let mut out: Vec<&str> = lines[..line - 1].to_vec();
    out.extend_from_slice(&lines[end..]);
    out.join("\n") + "\n"
}

/// The fields of the full example config that are refused, in file order, with
/// how their message starts: the example's Sentinel and TLS fields, which
/// its `backend: memory` has no use for (refused, never accepted and
/// ignored).
const NOT_IN_THIS_BUILD: [(&str, &str); 2] = [
    (
        "store.master_name",
        "`master_name` is for redis_sentinel, not memory",
    ),
    (
        "store.tls",
        "`tls` needs a Redis backend with rediss:// URLs",
    ),
];

/// The full example config with the fields of [`NOT_IN_THIS_BUILD`] taken out,
/// checking on the way that each is refused, by its path and line.
fn spec_example_supported() -> String {
    let mut text = SPEC_EXAMPLE.to_owned();
    for (field, message) in NOT_IN_THIS_BUILD {
        let e = match parse_with_env(&text, "gateway.yaml", &env) {
            Ok(_) => panic!("{field} was accepted"),
            Err(e) => e,
        };
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.starts_with(message), "{e}");
        text = without_block(&text, e.line.expect("a line"));
    }
    text
}

/// The full example config (every field written) parses, but for the
/// fields this build refuses by name, and every value is read as written.
///
/// Why one function: one assertion per field of the example, in file
/// order, so a field the example gains is checked where it appears.
#[test]
fn spec_example_parses_but_for_what_this_build_lacks() {
    let text = spec_example_supported();
    let loaded = match parse_with_env(&text, "/etc/tollgate/gateway.yaml", &env) {
        Ok(loaded) => loaded,
        Err(e) => panic!("{e}"),
    };
    let c = &loaded.config;

    assert_eq!(c.server.listen, vec!["0.0.0.0:8080".parse().expect("addr")]);
    let tls = c.server.tls.as_ref().expect("tls");
    assert_eq!(tls.listen, vec!["0.0.0.0:8443".parse().expect("addr")]);
    assert_eq!(
        tls.certificates,
        vec![CertificateConfig {
            cert: PathBuf::from("/etc/tollgate/certs/api.pem"),
            key: PathBuf::from("/etc/tollgate/certs/api.key"),
        }],
        "relative to the config file's directory"
    );
    assert!(c.server.trusted_proxies.is_empty() && c.server.deny.is_empty());
    assert_eq!(c.server.ipv6_prefix, 64);
    assert_eq!(c.server.header_read_timeout, secs(10));
    assert_eq!(c.server.idle_timeout, secs(60));
    assert_eq!(c.server.max_header_bytes, 16 * 1024);
    assert_eq!(c.server.max_body_bytes, None);
    assert_eq!(c.server.max_connections, 10_000);
    assert_eq!(c.server.shutdown_grace, secs(30));
    assert_eq!(c.server.escaped_slashes, EscapedSlashes::Reject);

    assert_eq!(
        c.admin.listen,
        Some("127.0.0.1:9901".parse().expect("addr"))
    );
    assert_eq!(c.admin.token, None, "${{TOLLGATE_ADMIN_TOKEN:-}} is empty");

    assert_eq!(c.store.backend, StoreBackend::Memory);
    assert_eq!(c.store.prefix, "tollgate");
    assert_eq!(c.store.timeout, Duration::from_millis(50));
    assert_eq!(c.store.on_error, OnError::Local);
    assert_eq!(c.store.clock, TimeSource::Store);

    assert_eq!(c.upstreams.len(), 1);
    let users = &c.upstreams[0];
    assert_eq!(users.name, "users");
    assert_eq!(users.targets.len(), 2);
    assert_eq!(users.targets[0].url, "http://127.0.0.1:9001");
    assert_eq!(users.targets[0].weight, 1);
    assert_eq!(users.targets[1].url, "http://127.0.0.1:9002");
    assert_eq!(users.targets[1].weight, 2);
    assert_eq!(users.balance, Balance::RoundRobin);
    assert_eq!(users.connect_timeout, secs(2));
    assert_eq!(users.timeout, secs(30));
    assert_eq!(users.retries, 1);
    assert!(!users.http2);
    assert_eq!(
        users.tls,
        Some(UpstreamTls {
            ca: Some(PathBuf::from("/etc/tollgate/certs/ca.pem")),
            verify: true,
            server_name: Some("users.internal".into()),
            client_cert: None,
        })
    );
    assert_eq!(
        users.health.passive,
        Some(PassiveHealth {
            failures: 5,
            eject: secs(30)
        })
    );
    assert_eq!(
        users.health.active,
        Some(ActiveHealth {
            path: PathAndQuery::from_static("/healthz"),
            interval: secs(5),
            timeout: secs(1),
            healthy: 2,
            unhealthy: 3,
        })
    );

    let names: Vec<&str> = c.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["per_client", "login", "hello.0"]);
    let per_client = &c.limits[0];
    assert_eq!(
        per_client.params,
        AlgoParams::TokenBucket(
            token_bucket::Params::new(rate(10, secs(1)), 20, us(Duration::ZERO)).unwrap()
        )
    );
    assert_eq!(per_client.key, vec![KeySource::ClientIp]);
    let login = &c.limits[1];
    assert_eq!(
        login.params,
        AlgoParams::FixedWindow(
            fixed_window::Params::new(5, fixed_window::Window::Fixed(us(secs(60)))).unwrap()
        )
    );
    assert_eq!(
        login.key,
        vec![
            KeySource::ClientIp,
            KeySource::Header(HeaderName::from_static("x-user"))
        ]
    );
    assert_eq!(login.on_missing_key, OnMissingKey::ClientIp);
    assert_eq!(login.cost, 1);
    assert_eq!(login.mode, Mode::Enforce);
    assert_eq!(
        login.lockout,
        Some(LockParams {
            after: 1,
            within: us(secs(60)),
            duration: us(secs(15 * 60)),
            escalate: 2,
            max_duration: us(secs(86_400)),
            forget_after: us(secs(86_400)),
        })
    );
    assert_eq!(login.exempt, vec!["10.0.0.0/8".parse().expect("match")]);
    assert_eq!(
        login.overrides,
        vec![Override {
            matcher: "header:x-user=batch".parse().expect("match"),
            params: AlgoParams::FixedWindow(
                fixed_window::Params::new(50, fixed_window::Window::Fixed(us(secs(60)))).unwrap()
            ),
        }]
    );
    let hello_limit = &c.limits[2];
    assert_eq!(
        hello_limit.params,
        AlgoParams::Gcra(gcra::Params::new(rate(5, secs(10)), 5, us(Duration::ZERO)).unwrap())
    );
    let lockout = hello_limit.lockout.as_ref().expect("lockout");
    assert_eq!(lockout.duration, us(secs(30)));
    assert_eq!(
        lockout.within,
        us(secs(10)),
        "defaults to the rate's period"
    );
    assert_eq!(lockout.max_duration, us(secs(86_400)));

    assert_eq!(c.routes.len(), 2);
    let r = &c.routes[0];
    assert_eq!(r.name, "users");
    assert_eq!(r.hosts, ["api.example.com", "*.example.com"]);
    assert!(matches!(&r.path, PathMatch::Prefix(p) if p == "/users"));
    assert_eq!(r.methods, [Method::GET, Method::POST]);
    assert_eq!(
        r.headers,
        vec![(
            HeaderName::from_static("x-version"),
            HeaderMatch::Exact("2".into())
        )]
    );
    assert_eq!(r.action, RouteAction::Upstream("users".into()));
    assert!(r.strip_prefix && r.preserve_host);
    assert_eq!(r.timeout, Some(secs(10)));
    assert_eq!(r.limits, ["per_client", "login"]);
    assert_eq!(r.limit_response, LimitResponse::default());
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    assert_eq!(r.line, line_of("- name: users"));
    let h = &c.routes[1];
    assert_eq!(h.name, "hello");
    assert!(matches!(&h.path, PathMatch::Exact(p) if p == "/hello"));
    let RouteAction::Respond(respond) = &h.action else {
        panic!("respond expected");
    };
    assert_eq!(respond.status, StatusCode::OK);
    assert_eq!(respond.body, "hello\n");
    assert_eq!(respond.headers.len(), 1);
    assert_eq!(respond.headers[0].0, "content-type");
    assert_eq!(respond.headers[0].1, "text/plain");
    assert_eq!(h.limits, ["hello.0"]);
    assert_eq!(h.line, line_of("- name: hello"));

    assert_eq!(
        loaded.warnings,
        [
            "store.url has no effect with backend: memory",
            "store.on_error: local has no effect with backend: memory (the memory store does not fail)",
            "upstreams.users.tls has no effect: the upstream has no https:// target",
        ]
    );
    assert_eq!(loaded.sha256.len(), 64);
}

#[test]
fn spec_example_loads_from_its_file() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/spec_example.yaml");
    let e = load(&path).expect_err("the example has fields this build refuses");
    assert_eq!(e.field, NOT_IN_THIS_BUILD[0].0);
    assert_eq!(e.file, path.display().to_string());
    let dir = std::env::temp_dir().join(format!("tollgate-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let supported = dir.join("gateway.yaml");
    std::fs::write(&supported, spec_example_supported()).expect("write");
    let loaded = load(&supported).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.routes.len(), 2);
    // sha256 of the bytes on disk, before expansion.
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(&supported).expect("fixture");
    assert_eq!(loaded.sha256, hex::encode(Sha256::digest(bytes)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn load_names_an_unreadable_file() {
    let e = load(Path::new("/nonexistent/gateway.yaml")).expect_err("missing file");
    assert_eq!(e.file, "/nonexistent/gateway.yaml");
    assert!(e.field.is_empty() && e.line.is_none());
    assert!(
        e.to_string()
            .starts_with("/nonexistent/gateway.yaml: cannot read the config file: "),
        "{e}"
    );
}

#[test]
fn sha256_is_of_the_text_before_expansion() {
    let text = "admin:\n  token: \"${ADMIN_TOKEN}\"\n";
    let loaded = ok(text);
    assert_eq!(loaded.config.admin.token.as_deref(), Some("s3cret"));
    use sha2::{Digest, Sha256};
    assert_eq!(loaded.sha256, hex::encode(Sha256::digest(text.as_bytes())));
}

// ----- defaults -----

#[test]
fn empty_file_is_all_defaults() {
    let loaded = ok("");
    let c = &loaded.config;
    assert_eq!(c.server.listen, vec!["0.0.0.0:8080".parse().expect("addr")]);
    assert_eq!(
        c.admin.listen,
        Some("127.0.0.1:9901".parse().expect("addr"))
    );
    assert_eq!(c.store.backend, StoreBackend::Memory);
    assert!(c.upstreams.is_empty() && c.limits.is_empty() && c.routes.is_empty());
    assert_eq!(
        loaded.warnings,
        ["no routes: every request is answered 404"]
    );
    assert_eq!(ok("# nothing yet\n").config.routes.len(), 0);
    assert_eq!(ok("server:\nroutes:\n").config.server.ipv6_prefix, 64);
}

#[test]
fn route_and_limit_defaults() {
    let c = ok("\
upstreams:
  u: { targets: [\"http://u.internal\"] }
routes:
  - name: r
    upstream: u
    limits:
      - { algorithm: token_bucket, rate: 3/250ms }
      - { algorithm: concurrency, limit: 2 }
      - { algorithm: sliding_log, limit: 9, window: 1h }
")
    .config;
    let r = &c.routes[0];
    assert!(r.hosts.is_empty() && r.methods.is_empty() && r.headers.is_empty());
    assert!(matches!(r.path, PathMatch::Any));
    assert!(!r.strip_prefix && r.preserve_host);
    assert_eq!(r.timeout, None);
    assert_eq!(r.limit_response.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.limit_response.headers, HeaderStyle::Standard);
    assert_eq!(r.line, 4);

    let tb = &c.limits[0];
    assert_eq!(
        tb.params,
        AlgoParams::TokenBucket(
            token_bucket::Params::new(rate(3, Duration::from_millis(250)), 3, us(Duration::ZERO))
                .unwrap()
        ),
        "burst defaults to the rate's count"
    );
    assert_eq!(tb.key, vec![KeySource::ClientIp]);
    assert_eq!(tb.on_missing_key, OnMissingKey::ClientIp);
    assert_eq!((tb.cost, tb.mode), (1, Mode::Enforce));
    assert!(tb.lockout.is_none() && tb.exempt.is_empty() && tb.overrides.is_empty());
    assert_eq!(
        c.limits[1].params,
        AlgoParams::Concurrency(concurrency::Params::new(2, us(secs(300))).unwrap())
    );
    assert_eq!(
        c.limits[2].params,
        AlgoParams::SlidingLog(sliding_log::Params::new(9, us(secs(3600))).unwrap())
    );
    let u = &c.upstreams[0];
    assert_eq!(u.health, HealthConfig::default());
}

#[test]
fn store_and_admin_settings() {
    let c = ok("\
admin: { listen: \"\", token: \"\" }
store:
  backend: redis
  url: \"redis://:pw@${REDIS_HOST}:6380/1\"
  on_error: deny
  clock: local
  prefix: tg
  timeout: 250ms
")
    .config;
    assert_eq!(c.admin.listen, None);
    assert_eq!(c.admin.token, None);
    assert_eq!(
        c.store.backend,
        StoreBackend::Redis {
            url: "redis://:pw@cache.internal:6380/1".into()
        }
    );
    assert_eq!(c.store.on_error, OnError::Deny);
    assert_eq!(c.store.clock, TimeSource::Local);
    assert_eq!(c.store.prefix, "tg");
    assert_eq!(c.store.timeout, Duration::from_millis(250));

    assert_eq!(ok("admin: { listen: null }\n").config.admin.listen, None);
    assert_eq!(ok("admin: { listen: }\n").config.admin.listen, None);
    assert_eq!(
        ok("store: { backend: redis }\n").config.store.backend,
        StoreBackend::Redis {
            url: "redis://127.0.0.1:6379/0".into()
        }
    );
    assert_eq!(
        ok("store: { backend: redis_cluster, urls: [\"redis://a:7000\", \"redis://b:7001\"] }\n")
            .config
            .store
            .backend,
        StoreBackend::Cluster {
            seeds: vec!["redis://a:7000".into(), "redis://b:7001".into()]
        }
    );
    assert_eq!(
        ok("store: { backend: redis_sentinel, urls: [\"redis://s1:26379\"], master_name: mymaster, url: \"redis://:pw@mymaster/2\" }\n")
            .config
            .store
            .backend,
        StoreBackend::Sentinel {
            sentinels: vec!["redis://s1:26379".into()],
            master_name: "mymaster".into(),
            master: Some("redis://:pw@mymaster/2".into()),
        }
    );
    let tls = ok("store: { backend: redis, url: \"rediss://a:6380\" }\n");
    assert_eq!(
        tls.config.store.tls, None,
        "rediss:// alone: the system's roots"
    );
    for (text, field, line, message) in [
        ("store:\n  backend: redis_cluster\n", "store.urls", 2, "redis_cluster needs at least one URL"),
        ("store:\n  backend: redis_sentinel\n  urls: [\"redis://s:26379\"]\n", "store.master_name", 2, "redis_sentinel needs `master_name`"),
        ("store:\n  urls: [\"redis://a:7000\"]\n", "store.urls", 2, "`urls` (seed nodes, sentinels) are for"),
        ("store:\n  backend: redis\n  master_name: m\n", "store.master_name", 3, "`master_name` is for redis_sentinel"),
        ("store:\n  backend: redis_cluster\n  url: \"redis://a:1\"\n  urls: [\"redis://a:1\"]\n", "store.url", 3, "redis_cluster takes its seed nodes"),
        ("store:\n  backend: redis_sentinel\n  master_name: m\n  url: \"redis://other/0\"\n  urls: [\"redis://s:1\"]\n", "store.url", 4, "with redis_sentinel, `url` gives"),
        ("store:\n  backend: redis_cluster\n  urls: [\"redis://a:1\", \"http://b\"]\n", "store.urls[1]", 3, "expected a redis:// or rediss:// URL"),
        ("store:\n  backend: redis\n  tls: { ca: ca.pem }\n", "store.tls", 3, "`tls` needs a Redis backend with rediss://"),
        ("store:\n  backend: redis_cluster\n  urls: [\"rediss://a:1\"]\n  tls: { server_name: x }\n", "store.tls.server_name", 4, "not with redis_cluster"),
        ("store:\n  backend: redis\n  url: \"rediss://a:1\"\n  tls:\n    ca: /nonexistent/ca.pem\n", "store.tls.ca", 5, "cannot read /nonexistent/ca.pem"),
        ("store:\n  backend: redis\n  url: \"rediss://a:1\"\n  tls: { cert: c.pem }\n", "store.tls", 4, "`cert` needs its `key`"),
    ] {
        let e = err_at(text, field, line);
        assert!(e.message.starts_with(message), "{e}");
    }
}

#[test]
fn clock_local_with_a_shared_store_warns() {
    for backend in [
        "backend: redis, url: \"redis://127.0.0.1:6379\"",
        "backend: redis_sentinel, urls: [\"redis://127.0.0.1:26379\"], master_name: m",
        "backend: redis_cluster, urls: [\"redis://127.0.0.1:7000\"]",
    ] {
        let text = |clock: &str| {
            format!("store: {{ {backend}{clock} }}\nroutes: [{{ name: r, respond: {{}} }}]\n")
        };
        let local = ok(&text(", clock: local"));
        let name = backend.split([' ', ',']).nth(1).unwrap();
        assert_eq!(
            local.warnings,
            [format!("store.clock: local with backend: {name}: each instance decides with its own clock, so instances with skewed clocks can over-admit without bound on fixed_window, sliding_window and sliding_log at window boundaries; keep clock: store unless the clocks are synchronised")],
            "{backend}"
        );
        assert!(ok(&text("")).warnings.is_empty(), "{backend}");
        assert!(ok(&text(", clock: store")).warnings.is_empty(), "{backend}");
    }
    // One instance's memory store: its own clock is the only one.
    assert!(
        ok("store: { clock: local }\nroutes: [{ name: r, respond: {} }]\n")
            .warnings
            .is_empty()
    );
}

#[test]
fn on_error_local_with_memory_warns_only_when_written() {
    let written = ok("store: { on_error: local }\nroutes: [{ name: r, respond: {} }]\n");
    assert_eq!(written.warnings.len(), 1);
    assert!(written.warnings[0].starts_with("store.on_error: local has no effect"));
    assert!(ok("routes: [{ name: r, respond: {} }]\n")
        .warnings
        .is_empty());
}

#[test]
fn server_settings() {
    let c = ok("\
server:
  listen: [\"[::]:8080\"]
  trusted_proxies: [\"10.0.0.0/8\", \"192.168.1.1\"]
  deny: [\"2001:db8::/32\"]
  ipv6_prefix: 56
  timeouts: { header_read: 5s, idle: 2m }
  max_header_bytes: 32KiB
  max_body_bytes: 10MiB
  max_connections: 5
  shutdown_grace: 0
")
    .config;
    let s = &c.server;
    assert_eq!(s.listen, vec!["[::]:8080".parse().expect("addr")]);
    assert_eq!(
        s.trusted_proxies,
        vec![
            "10.0.0.0/8".parse::<ipnet::IpNet>().expect("net"),
            "192.168.1.1/32".parse().expect("net")
        ]
    );
    assert_eq!(
        s.deny,
        vec!["2001:db8::/32".parse::<ipnet::IpNet>().expect("net")]
    );
    assert_eq!(s.ipv6_prefix, 56);
    assert_eq!(
        (s.header_read_timeout, s.idle_timeout),
        (secs(5), secs(120))
    );
    assert_eq!(s.max_header_bytes, 32 * 1024);
    assert_eq!(s.max_body_bytes, Some(10 << 20));
    assert_eq!(s.max_connections, 5);
    assert_eq!(s.shutdown_grace, Duration::ZERO);
}

#[test]
fn listener_rules() {
    let e = err_at("server:\n  listen: []\n", "server.listen", 2);
    assert_eq!(e.message, "at least one listener is required");
    err_at(
        "server:\n  listen: [\"0.0.0.0:80\", \"127.0.0.1:80\"]\n",
        "server.listen[1]",
        2,
    );
    // `admin:` is absent: the field is exact, its position unknown.
    let e = err("server:\n  listen: [\"0.0.0.0:9901\"]\n");
    assert_eq!((e.field.as_str(), e.line), ("admin.listen", None));
    assert!(
        e.message.contains("the admin API needs its own address"),
        "{e}"
    );
    err_at("server:\n  ipv6_prefix: 129\n", "server.ipv6_prefix", 2);
    err_at(
        "server:\n  max_connections: 0\n",
        "server.max_connections",
        2,
    );
    // Port 0 (tests) never collides.
    ok("server: { listen: [\"127.0.0.1:0\"] }\nadmin: { listen: \"127.0.0.1:0\" }\n");
}

#[test]
fn escaped_slashes_modes() {
    let mode = |yaml: &str| ok(yaml).config.server.escaped_slashes;
    assert_eq!(mode("server: {}\n"), EscapedSlashes::Reject, "the default");
    for (text, want) in [
        ("reject", EscapedSlashes::Reject),
        ("decode", EscapedSlashes::Decode),
        ("keep", EscapedSlashes::Keep),
    ] {
        assert_eq!(mode(&format!("server:\n  escaped_slashes: {text}\n")), want);
    }
    let e = err_at(
        "server:\n  ipv6_prefix: 64\n  escaped_slashes: Decode\n",
        "server.escaped_slashes",
        3,
    );
    assert!(
        e.message.contains("`reject`, `decode`, `keep`"),
        "the message names the choices: {e}"
    );
    // A route path with an escaped slash can only match with `keep`.
    let route = "  - { name: f, match: { path: /files/a%2fb }, upstream: users }\n";
    for mode in [
        "",
        "server: { escaped_slashes: reject }\n",
        "server: { escaped_slashes: decode }\n",
    ] {
        let e = err_at(
            &format!("{mode}{BASE}{route}"),
            "routes[0].match.path",
            if mode.is_empty() { 9 } else { 10 },
        );
        assert!(e.message.contains("escaped slash"), "{e}");
    }
    ok(&format!(
        "server: {{ escaped_slashes: keep }}\n{BASE}{route}"
    ));
    err_at(
        &format!("{BASE}  - {{ name: e, match: {{ exact: /a%5Cb }}, respond: {{}} }}\n"),
        "routes[0].match.exact",
        9,
    );
}

// ----- limits: naming, keys, windows, lockouts -----

#[test]
fn inline_limits_are_named_after_their_route() {
    let c = ok(&format!(
        "{BASE}  - name: hello
    respond: {{ body: hi }}
    limits:
      - per_client
      - {{ algorithm: fixed_window, limit: 5, window: 1m }}
      - {{ name: hello_daily, algorithm: fixed_window, limit: 100, window: 1d }}
      - {{ algorithm: gcra, rate: 1/s }}
"
    ))
    .config;
    let names: Vec<&str> = c.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["per_client", "hello.1", "hello_daily", "hello.3"]);
    assert_eq!(
        c.routes[0].limits,
        ["per_client", "hello.1", "hello_daily", "hello.3"]
    );
    assert!(c.limit("hello_daily").is_some() && c.upstream("users").is_some());
}

#[test]
fn keys_are_one_source_or_a_list() {
    let c = ok("\
limits:
  a: { algorithm: sliding_window, limit: 1, window: 1s, key: \"header:X-User\" }
  b: { algorithm: sliding_window, limit: 1, window: 1s, key: [route, global, \"query:k\", \"cookie:s\"] }
")
    .config;
    assert_eq!(
        c.limits[0].key,
        vec![KeySource::Header(HeaderName::from_static("x-user"))]
    );
    assert_eq!(
        c.limits[1].key,
        vec![
            KeySource::Route,
            KeySource::Global,
            KeySource::Query("k".into()),
            KeySource::Cookie("s".into())
        ]
    );
    let e = err_at(
        "limits:\n  a: { algorithm: gcra, rate: 1/s, key: [client_ip, ip] }\n",
        "limits.a.key[1]",
        2,
    );
    assert!(e.message.starts_with("expected a key source"), "{e}");
    err_at(
        "limits:\n  a: { algorithm: gcra, rate: 1/s, key: [] }\n",
        "limits.a.key",
        2,
    );
}

#[test]
fn monthly_windows_and_lockout_defaults() {
    let c = ok("\
limits:
  quota:
    algorithm: fixed_window
    limit: 10000
    window: month
    lockout: { duration: 1h }
  shaped:
    algorithm: leaky_bucket
    rate: 100/m
    burst: 10
    max_delay: 2s
    lockout: { duration: 1h, after: 3, within: 5m, escalate: 2, max_duration: 2h, forget_after: 7d }
")
    .config;
    assert_eq!(
        c.limits[0].params,
        AlgoParams::FixedWindow(
            fixed_window::Params::new(10_000, fixed_window::Window::Month).unwrap()
        )
    );
    let l = c.limits[0].lockout.as_ref().expect("lockout");
    assert_eq!(l.within, us(secs(31 * 86_400)));
    assert_eq!((l.after, l.escalate), (1, 1));
    assert_eq!(l.max_duration, us(secs(86_400)));
    assert_eq!(l.forget_after, us(secs(86_400)));
    assert_eq!(
        c.limits[1].lockout,
        Some(LockParams {
            after: 3,
            within: us(secs(300)),
            duration: us(secs(3600)),
            escalate: 2,
            max_duration: us(secs(7200)),
            forget_after: us(secs(7 * 86_400)),
        })
    );
    assert_eq!(
        c.limits[1].params,
        AlgoParams::LeakyBucket(
            leaky_bucket::Params::new(rate(100, secs(60)), 10, us(secs(2))).unwrap()
        )
    );
    let e = err_at(
        "limits:\n  s:\n    algorithm: sliding_window\n    limit: 1\n    window: month\n",
        "limits.s.window",
        5,
    );
    assert_eq!(
        e.message,
        "`window: month` is only supported by fixed_window, not sliding_window"
    );
    let e = err_at(
        "limits:\n  l: { algorithm: gcra, rate: 1/s, lockout: { duration: 1h, max_duration: 1m } }\n",
        "limits.l.lockout.max_duration",
        2,
    );
    assert_eq!(
        e.message,
        "max_duration (1m) must be at least duration (1h)"
    );
    err_at(
        "limits:\n  l: { algorithm: gcra, rate: 1/s, lockout: { after: 2 } }\n",
        "limits.l.lockout",
        2,
    );
}

#[test]
fn exempt_and_overrides() {
    let c = ok("\
limits:
  l:
    algorithm: token_bucket
    rate: 10/s
    exempt: [\"10.0.0.0/8\", \"header:x-api-key=internal-batch\"]
    overrides:
      - { match: \"header:x-api-key=partner-7\", rate: 100/s, burst: 200 }
      - { match: \"203.0.113.0/24\", burst: 1 }
")
    .config;
    let l = &c.limits[0];
    assert_eq!(l.exempt.len(), 2);
    assert_eq!(
        l.overrides[0].params,
        AlgoParams::TokenBucket(token_bucket::Params::new(rate(100, secs(1)), 200, 0).unwrap())
    );
    assert_eq!(
        l.overrides[1].params,
        AlgoParams::TokenBucket(token_bucket::Params::new(rate(10, secs(1)), 1, 0).unwrap()),
        "an override keeps the parameters it does not set"
    );
    assert_eq!(l.overrides[1].matcher.to_string(), "203.0.113.0/24");

    let e = err_at(
        "limits:\n  l:\n    algorithm: gcra\n    rate: 1/s\n    exempt: [\"client_ip=1.2.3.4\"]\n",
        "limits.l.exempt[0]",
        5,
    );
    assert!(e.message.contains("cannot be matched by value"), "{e}");
    err_at(
        "limits:\n  l:\n    algorithm: gcra\n    rate: 1/s\n    overrides: [{ match: \"10.0.0.0/8\" }]\n",
        "limits.l.overrides[0]",
        5,
    );
}

#[test]
fn a_cost_that_can_never_pass_is_an_error() {
    let e = err_at(
        "limits:\n  l: { algorithm: fixed_window, limit: 2, window: 1s, cost: 3 }\n",
        "limits.l.cost",
        2,
    );
    assert_eq!(
        e.message,
        "cost 3 is more than the limit's capacity 2: every request would be rejected; raise `limit` or lower `cost`"
    );
    // An override that lowers the capacity under the cost, named by its path.
    let e = err_at(
        "limits:\n  l:\n    algorithm: token_bucket\n    rate: 10/s\n    cost: 4\n    overrides:\n      - { match: \"10.0.0.0/8\", burst: 3 }\n",
        "limits.l.overrides[0]",
        7,
    );
    assert!(
        e.message
            .contains("capacity 3 for the clients of limits.l.overrides[0]"),
        "{e}"
    );
    // An inline limit is named by where it is written.
    err_at(
        "routes:\n  - name: r\n    respond: {}\n    limits:\n      - { algorithm: gcra, rate: 1/s, burst: 2, cost: 3 }\n",
        "routes[0].limits[0].cost",
        5,
    );
    // `concurrency` counts requests, whatever their cost.
    ok("limits:\n  c: { algorithm: concurrency, limit: 1, cost: 5 }\n");
}

#[test]
fn limit_config_compares_for_reload() {
    let a = ok("limits:\n  l: { algorithm: gcra, rate: 1/s }\n").config;
    let b = ok("limits:\n  l: { algorithm: gcra, rate: 1/s, burst: 1 }\n").config;
    let c = ok("limits:\n  l: { algorithm: gcra, rate: 2/s }\n").config;
    assert_eq!(a.limits, b.limits);
    assert_ne!(a.limits, c.limits);
}

// ----- routes -----

#[test]
fn route_matchers() {
    let c = ok(&format!(
        "{BASE}  - name: a
    match:
      hosts: [API.example.com]
      regex: \"^/v[0-9]+/items$\"
      methods: [get, Post]
      headers: {{ x-version: 2, X-Debug: \"*\" }}
    upstream: users
    preserve_host: false
    timeout: 3s
    limit_response: {{ status: 503, headers: none }}
"
    ))
    .config;
    let r = &c.routes[0];
    assert_eq!(r.hosts, ["api.example.com"]);
    assert!(matches!(&r.path, PathMatch::Regex(re) if re.is_match("/v2/items")));
    assert_eq!(r.methods, [Method::GET, Method::POST]);
    assert_eq!(
        r.headers,
        vec![
            (
                HeaderName::from_static("x-version"),
                HeaderMatch::Exact("2".into())
            ),
            (HeaderName::from_static("x-debug"), HeaderMatch::Present),
        ]
    );
    assert!(!r.preserve_host);
    assert_eq!(r.timeout, Some(secs(3)));
    assert_eq!(r.limit_response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.limit_response.headers, HeaderStyle::None);
}

#[test]
fn shadowed_routes_are_reported_with_lines() {
    let loaded = ok("\
routes:
  - name: all
    respond: {}
  - name: users
    match: { path: /users }
    respond: {}
");
    assert_eq!(
        loaded.warnings,
        ["route \"users\" (line 4) is shadowed by route \"all\" (line 2)"]
    );
}

#[test]
fn env_expansion_in_a_whole_config() {
    let c = ok("\
# ${UNSET_IN_A_COMMENT} is fine
limits:
  l: { algorithm: fixed_window, limit: ${LIMIT}, window: ${WINDOW:-30s} }
  m: { algorithm: fixed_window, limit: ${NOT_SET:-3}, window: 1s }
admin: { token: ${ADMIN_TOKEN} }
")
    .config;
    assert_eq!(
        c.limits[0].params,
        AlgoParams::FixedWindow(
            fixed_window::Params::new(7, fixed_window::Window::Fixed(us(secs(30)))).unwrap()
        )
    );
    assert_eq!(
        c.limits[1].params,
        AlgoParams::FixedWindow(
            fixed_window::Params::new(3, fixed_window::Window::Fixed(us(secs(1)))).unwrap()
        )
    );
    assert_eq!(c.admin.token.as_deref(), Some("s3cret"));
}

// ----- one test per kind of error: exact field path and line -----

#[test]
fn bad_rate() {
    let e = err_at(
        &format!(
            "{BASE}  - name: a
    upstream: users
  - name: b
    upstream: users
  - name: c
    upstream: users
    limits:
      - {{ algorithm: token_bucket, rate: 10 per s }}
"
        ),
        "routes[2].limits[0].rate",
        16,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:16:42: routes[2].limits[0].rate: expected \"<n>/<period>\", got \"10 per s\""
    );
}

#[test]
fn bad_duration() {
    let e = err_at(
        "server:\n  timeouts:\n    idle: 10 secs\n",
        "server.timeouts.idle",
        3,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:3:11: server.timeouts.idle: expected a duration like \"10s\", got \"10 secs\""
    );
}

#[test]
fn bad_size() {
    let e = err_at(
        "server:\n  max_header_bytes: 16 kilobytes\n",
        "server.max_header_bytes",
        2,
    );
    assert_eq!(
        e.message,
        "expected a size like \"16KiB\", got \"16 kilobytes\""
    );
}

#[test]
fn bad_cidr() {
    let e = err_at(
        "server:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - 10.0.0.0/99\n",
        "server.trusted_proxies[1]",
        4,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:4:7: server.trusted_proxies[1]: expected a CIDR like \"10.0.0.0/8\" or an IP address, got \"10.0.0.0/99\""
    );
}

#[test]
fn bad_url() {
    let e = err_at(
        "upstreams:\n  u:\n    targets:\n      - http://ok:1\n      - ftp://files\n",
        "upstreams.u.targets[1]",
        5,
    );
    assert_eq!(
        e.message,
        "a target URL must start with http:// or https://, got \"ftp://files\""
    );
    err_at(
        "upstreams:\n  u:\n    targets:\n      - { url: \"http://x/api\", weight: 2 }\n",
        "upstreams.u.targets[0].url",
        4,
    );
    err_at(
        "upstreams:\n  u:\n    targets:\n      - { url: \"http://x\", weight: 0 }\n",
        "upstreams.u.targets[0].weight",
        4,
    );
    err_at(
        "upstreams:\n  u:\n    targets: []\n",
        "upstreams.u.targets",
        3,
    );
    err_at(
        "store:\n  backend: redis\n  url: \"http://127.0.0.1:6379\"\n",
        "store.url",
        3,
    );
}

#[test]
fn active_health_defaults_and_checks() {
    let c = ok("upstreams:\n  u:\n    targets: [\"http://a\"]\n    health: { active: {} }\n");
    assert_eq!(
        c.config.upstreams[0].health,
        HealthConfig {
            passive: None,
            active: Some(ActiveHealth {
                path: PathAndQuery::from_static("/healthz"),
                interval: secs(5),
                timeout: secs(1),
                healthy: 2,
                unhealthy: 3,
            }),
        }
    );
    let c = ok("upstreams:\n  u:\n    targets: [\"http://a\"]\n    health:\n      active: { path: \"/ping?deep=1\", interval: 200ms, timeout: 50ms, healthy: 1, unhealthy: 1 }\n");
    let active = c.config.upstreams[0].health.active.clone().expect("active");
    assert_eq!(active.path, "/ping?deep=1");
    assert_eq!(
        (active.interval, active.timeout),
        (Duration::from_millis(200), Duration::from_millis(50))
    );
    assert_eq!((active.healthy, active.unhealthy), (1, 1));

    let base = "upstreams:\n  u:\n    targets: [\"http://a\"]\n    health:\n      active:\n";
    for (field, value, message) in [
        (
            "path",
            "healthz",
            "a probe path must start with /, got \"healthz\"",
        ),
        ("path", "\"/a b\"", "\"/a b\" is not a valid path"),
        ("interval", "0s", "interval must be greater than 0"),
        ("timeout", "0ms", "timeout must be greater than 0"),
        (
            "timeout",
            "5s",
            "timeout (5s) must be shorter than interval (5s): a target is probed once per interval",
        ),
        ("healthy", "0", "healthy must be at least 1"),
        ("unhealthy", "0", "unhealthy must be at least 1"),
    ] {
        let e = err_at(
            &format!("{base}        {field}: {value}\n"),
            &format!("upstreams.u.health.active.{field}"),
            6,
        );
        assert_eq!(e.message, message);
    }
}

#[test]
fn a_target_is_listed_once() {
    let e = err_at(
        "upstreams:\n  u:\n    targets:\n      - http://a:1\n      - { url: \"HTTP://A:1/\", weight: 2 }\n",
        "upstreams.u.targets[1].url",
        5,
    );
    assert_eq!(
        e.message,
        "duplicate target \"HTTP://A:1/\" (also targets[0]); give it a weight instead"
    );
    ok("upstreams:\n  u:\n    targets: [\"http://a:1\", \"http://a:2\", \"http://b:1\"]\n");
}

#[test]
fn bad_regex() {
    let e = err_at(
        &format!(
            "{BASE}  - name: a\n    match: {{ regex: \"^/v[0-9+/items$\" }}\n    upstream: users\n"
        ),
        "routes[0].match.regex",
        10,
    );
    assert_eq!(e.message, "invalid regex: unclosed character class");
}

#[test]
fn burst_zero() {
    let e = err_at(
        "limits:\n  l:\n    algorithm: token_bucket\n    rate: 10/s\n    burst: 0\n",
        "limits.l.burst",
        5,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:5:12: limits.l.burst: burst must be at least 1"
    );
}

#[test]
fn algorithm_parameters_are_checked_with_their_position() {
    // Each used to pass `tollgate check` and fail only when the runtime was
    // built, without a line; an inline limit was named `r.0`.
    let inline = |limit: &str| {
        format!("routes:\n  - name: r\n    respond: {{}}\n    limits:\n      - {limit}\n")
    };
    let cases = [
        (
            "{ algorithm: gcra, rate: 2000000/s }",
            "routes[0].limits[0].rate",
            "rate is too fast for gcra: at most one request per microsecond",
        ),
        (
            "{ algorithm: fixed_window, limit: 2000000000000, window: 1s }",
            "routes[0].limits[0].limit",
            "limit is too large (at most 1000000000000)",
        ),
        (
            "{ algorithm: sliding_log, limit: 5, window: 1001d }",
            "routes[0].limits[0].window",
            "window is too large (at most 1000d)",
        ),
        (
            "{ algorithm: sliding_window, limit: 5, window: 0s }",
            "routes[0].limits[0].window",
            "window must be greater than 0",
        ),
        (
            "{ algorithm: token_bucket, rate: 10/s, burst: 0 }",
            "routes[0].limits[0].burst",
            "burst must be at least 1",
        ),
        (
            "{ algorithm: concurrency, limit: 0 }",
            "routes[0].limits[0].limit",
            "limit must be at least 1",
        ),
        (
            "{ algorithm: leaky_bucket, rate: 7/1000d, burst: 1000000000000 }",
            "routes[0].limits[0].burst",
            "burst, rate and max_delay together are too large to stay exact",
        ),
    ];
    for (limit, field, message) in cases {
        let e = err_at(&inline(limit), field, 5);
        assert!(e.message.starts_with(message), "{limit}: {e}");
        assert!(e.column.is_some(), "{e}");
    }
    // An override's bad value is named at the override.
    err_at(
        "limits:\n  l:\n    algorithm: gcra\n    rate: 1/s\n    overrides:\n      - { match: \"10.0.0.0/8\", rate: 5000000/s }\n",
        "limits.l.overrides[0].rate",
        6,
    );
}

#[test]
fn lockout_on_concurrency() {
    let e = err_at(
        "limits:\n  c:\n    algorithm: concurrency\n    limit: 10\n    lockout: { duration: 1m }\n",
        "limits.c.lockout",
        5,
    );
    assert_eq!(
        e.message,
        "a lockout is not supported on a concurrency limit"
    );
}

#[test]
fn unknown_field() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n    limitt: [per_client]\n"),
        "routes[0]",
        11,
    );
    assert!(
        e.message
            .starts_with("unknown field `limitt`, expected one of `name`, `match`"),
        "{e}"
    );
    err_at("server:\n  listen_on: []\n", "server", 2);
    err_at(
        "limits:\n  l: { algorithm: gcra, rate: 1/s, lockout: { duration: 1m, forever: true } }\n",
        "limits.l.lockout",
        2,
    );
}

#[test]
fn parameter_of_another_algorithm() {
    let e = err_at(
        "limits:\n  l:\n    algorithm: token_bucket\n    rate: 10/s\n    limit: 5\n",
        "limits.l.limit",
        5,
    );
    assert_eq!(
        e.message,
        "`limit` is not a parameter of token_bucket (it takes rate, burst, max_delay)"
    );
    err_at(
        "limits:\n  l: { algorithm: fixed_window, limit: 1, window: 1s, max_delay: 1s }\n",
        "limits.l.max_delay",
        2,
    );
    let e = err_at("limits:\n  l:\n    algorithm: gcra\n", "limits.l", 3);
    assert_eq!(e.message, "missing field `rate`, which gcra requires");
    err_at(
        "limits:\n  l:\n    algorithm: leaky\n",
        "limits.l.algorithm",
        3,
    );
}

#[test]
fn override_with_a_parameter_of_another_algorithm() {
    let e = err_at(
        "limits:\n  l:\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    overrides:\n      - { match: \"10.0.0.0/8\", rate: 10/s }\n",
        "limits.l.overrides[0].rate",
        7,
    );
    assert_eq!(
        e.message,
        "`rate` is not a parameter of fixed_window (an override may set limit, window)"
    );
}

#[test]
fn unknown_upstream() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    upstream: user\n"),
        "routes[0].upstream",
        10,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:10:15: routes[0].upstream: unknown upstream \"user\" (known: users)"
    );
}

#[test]
fn unknown_limit() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n    limits: [per_client, per_cleint]\n"),
        "routes[0].limits[1]",
        11,
    );
    assert_eq!(
        e.message,
        "unknown limit \"per_cleint\" (known: per_client)"
    );
}

#[test]
fn duplicate_route() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n  - name: a\n    respond: {{}}\n"),
        "routes[1].name",
        11,
    );
    assert_eq!(
        e.message,
        "duplicate route name \"a\" (first used by routes[0])"
    );
}

#[test]
fn duplicate_limit() {
    let e = err_at(
        &format!(
            "{BASE}  - name: a\n    upstream: users\n    limits:\n      - {{ name: per_client, algorithm: gcra, rate: 1/s }}\n"
        ),
        "routes[0].limits[0].name",
        12,
    );
    assert_eq!(
        e.message,
        "duplicate limit name \"per_client\" (already defined at limits.per_client)"
    );
    // An inline limit's generated name collides too.
    err_at(
        "limits:\n  r.0: { algorithm: gcra, rate: 1/s }\nroutes:\n  - name: r\n    respond: {}\n    limits: [{ algorithm: gcra, rate: 1/s }]\n",
        "routes[0].limits[0]",
        6,
    );
    // Duplicate keys under `limits:` and `upstreams:`.
    err_at(
        "limits:\n  l: { algorithm: gcra, rate: 1/s }\n  l: { algorithm: gcra, rate: 2/s }\n",
        "limits.l",
        2,
    );
    err_at(
        "upstreams:\n  u: { targets: [\"http://a\"] }\n  u: { targets: [\"http://b\"] }\n",
        "upstreams.u",
        2,
    );
}

#[test]
fn both_or_neither_upstream_and_respond() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n    respond: {{ status: 204 }}\n"),
        "routes[0]",
        9,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:9:5: routes[0]: a route needs exactly one of `upstream` and `respond`"
    );
    err_at(&format!("{BASE}  - name: a\n"), "routes[0]", 9);
}

#[test]
fn path_and_exact_together() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    match: {{ path: /a, exact: /a }}\n    upstream: users\n"),
        "routes[0].match",
        10,
    );
    assert_eq!(
        e.message,
        "`path` and `exact` cannot be combined: use one of `path`, `exact` and `regex`"
    );
    err_at(
        &format!("{BASE}  - name: a\n    match: {{ exact: users }}\n    upstream: users\n"),
        "routes[0].match.exact",
        10,
    );
}

#[test]
fn strip_prefix_without_path() {
    let e = err_at(
        &format!("{BASE}  - name: a\n    match: {{ exact: /a }}\n    upstream: users\n    strip_prefix: true\n"),
        "routes[0].strip_prefix",
        12,
    );
    assert_eq!(
        e.message,
        "strip_prefix needs a `path` prefix matcher in `match`"
    );
}

#[test]
fn unset_env_var() {
    let e = err_at(
        "store:\n  backend: redis\n  url: \"redis://${REDIS_HOST}:${REDIS_PORT}/0\"\n",
        "store.url",
        3,
    );
    assert_eq!(
        e.to_string(),
        "gateway.yaml:3:31: store.url: environment variable REDIS_PORT is not set (write ${REDIS_PORT:-default} to give a default)"
    );
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let e = err("routes:\n  - name: a\n   bad: [\n");
    assert!(e.line.is_some(), "{e}");
    assert!(e.field.is_empty(), "{e}");
    let e = err("- just\n- a list\n");
    assert_eq!(e.field, "");
    assert_eq!(
        e.message,
        "expected a mapping with fields server, admin, store, upstreams, limits, routes, consumers, telemetry, got a list"
    );
}

#[test]
fn bad_names_and_values() {
    err_at(
        "upstreams:\n  \"my api\": { targets: [\"http://a\"] }\n",
        "upstreams.my api",
        2,
    );
    err_at(
        &format!("{BASE}  - name: \"\"\n    upstream: users\n"),
        "routes[0].name",
        9,
    );
    err_at(
        &format!("{BASE}  - name: a\n    match: {{ hosts: [\"a.*.com\"] }}\n    upstream: users\n"),
        "routes[0].match.hosts[0]",
        10,
    );
    err_at(
        &format!("{BASE}  - name: a\n    match: {{ methods: [\"GE T\"] }}\n    upstream: users\n"),
        "routes[0].match.methods[0]",
        10,
    );
    err_at(
        &format!("{BASE}  - name: a\n    respond: {{ status: 99 }}\n"),
        "routes[0].respond.status",
        10,
    );
    err_at(
        &format!("{BASE}  - name: a\n    respond: {{ headers: {{ content-length: 5 }} }}\n"),
        "routes[0].respond.headers.content-length",
        10,
    );
    err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n    limit_response: {{ status: 200 }}\n"),
        "routes[0].limit_response.status",
        11,
    );
    err_at(
        &format!("{BASE}  - name: a\n    upstream: users\n    limits: [per_client, per_client]\n"),
        "routes[0].limits[1]",
        11,
    );
    err_at("store:\n  prefix: \"a b\"\n", "store.prefix", 2);
    // A brace would change the keys' hash tag on Redis Cluster.
    err_at("store:\n  prefix: \"tg{x\"\n", "store.prefix", 2);
    err_at("store:\n  prefix: \"tg}\"\n", "store.prefix", 2);
    err_at("store:\n  timeout: 0\n", "store.timeout", 2);
    err_at(
        "limits:\n  l: { name: x, algorithm: gcra, rate: 1/s }\n",
        "limits.l.name",
        2,
    );
}

/// Each raw block's "a mapping with fields ..." names exactly the fields
/// serde takes, so the message never drifts from the schema.
#[test]
fn every_block_names_its_real_fields() {
    use super::raw::*;
    fn fields<T: serde::de::DeserializeOwned>() -> (Vec<String>, Vec<String>) {
        let unknown = serde_yaml::from_str::<T>("zz_unknown: 1")
            .err()
            .expect("an unknown field")
            .to_string();
        let listed = unknown
            .split("expected one of ")
            .nth(1)
            .or_else(|| unknown.split("expected ").nth(1))
            .expect("serde lists the fields")
            .split(" at line")
            .next()
            .unwrap()
            .split(", ")
            .flat_map(|f| f.split(" or "))
            .map(|f| f.trim_matches('`').to_owned())
            .collect();
        let wrong = serde_yaml::from_str::<T>("5")
            .err()
            .expect("not a mapping")
            .to_string();
        let named = wrong
            .split("a mapping with fields ")
            .nth(1)
            .expect("the expecting text")
            .split(" at line")
            .next()
            .unwrap()
            .split(", ")
            .map(str::to_owned)
            .collect();
        (listed, named)
    }
    for (name, (listed, named)) in [
        ("RawConfig", fields::<RawConfig>()),
        ("RawServer", fields::<RawServer>()),
        ("RawTimeouts", fields::<RawTimeouts>()),
        ("RawAdmin", fields::<RawAdmin>()),
        ("RawStore", fields::<RawStore>()),
        ("RawUpstream", fields::<RawUpstream>()),
        ("RawHealth", fields::<RawHealth>()),
        ("RawPassive", fields::<RawPassive>()),
        ("RawActive", fields::<RawActive>()),
        ("RawLimit", fields::<RawLimit>()),
        ("RawLockout", fields::<RawLockout>()),
        ("RawOverride", fields::<RawOverride>()),
        ("RawRoute", fields::<RawRoute>()),
        ("RawMatch", fields::<RawMatch>()),
        ("RawRespond", fields::<RawRespond>()),
        ("RawLimitResponse", fields::<RawLimitResponse>()),
        ("RawServerTls", fields::<RawServerTls>()),
        ("RawClientAuth", fields::<RawClientAuth>()),
        ("RawRouteAuth", fields::<RawRouteAuth>()),
        ("RawConsumers", fields::<RawConsumers>()),
        ("RawApiKeys", fields::<RawApiKeys>()),
        ("RawJwt", fields::<RawJwt>()),
        ("RawIssuer", fields::<RawIssuer>()),
        ("RawJwks", fields::<RawJwks>()),
        ("RawPemKey", fields::<RawPemKey>()),
        ("RawMtls", fields::<RawMtls>()),
        ("RawConsumer", fields::<RawConsumer>()),
        ("RawConsumersFile", fields::<RawConsumersFile>()),
        ("RawIdentityHeaders", fields::<RawIdentityHeaders>()),
    ] {
        assert_eq!(listed, named, "{name}");
    }
}

#[test]
fn errors_speak_the_operators_language() {
    for text in [
        "limits:\n  a: 5\n",
        "upstreams:\n  u:\n  targets: [\"http://x\"]\n",
        "server:\n  max_connections: lots\n",
        "server:\n  ipv6_prefix: -1\n",
        "routes:\n  - r\n",
        "routes:\n  - name: r\n    respond: { status: x }\n",
        "upstreams:\n  u: { targets: [\"http://x\"], retries: -1 }\n",
        "limits:\n  a: { algorithm: gcra, rate: 1/s, burst: 1.5 }\n",
        "store: redis\n",
    ] {
        let e = err(text).to_string();
        for rust in [
            "Raw",
            "struct",
            "u8",
            "u16",
            "u32",
            "u64",
            "usize",
            "sequence",
            "unit value",
        ] {
            assert!(!e.contains(rust), "{rust} in: {e}");
        }
    }
    let e = err_at(
        "upstreams:\n  u:\n  targets: [\"http://x\"]\n",
        "upstreams.targets",
        3,
    );
    assert!(
        e.message
            .ends_with("got a list (is the block indented under its name?)"),
        "{e}"
    );
}

#[test]
fn header_styles_include_draft10_where_standard_is_accepted() {
    for (word, style) in [
        ("standard", HeaderStyle::Standard),
        ("draft10", HeaderStyle::Draft10),
        ("legacy", HeaderStyle::Legacy),
        ("both", HeaderStyle::Both),
        ("none", HeaderStyle::None),
    ] {
        let c = ok(&format!(
            "server:\n  limit_response: {{ headers: {word} }}\n{BASE}  \
             - {{ name: a, upstream: users }}\n  \
             - {{ name: b, upstream: users, limit_response: {{ headers: {word} }} }}\n"
        ))
        .config;
        assert_eq!(
            c.routes[0].limit_response.headers, style,
            "{word}: inherited"
        );
        assert_eq!(
            c.routes[1].limit_response.headers, style,
            "{word}: per route"
        );
    }
    let e = err_at(
        &format!(
            "{BASE}  - name: a\n    upstream: users\n    limit_response: {{ headers: draft11 }}\n"
        ),
        "routes[0].limit_response.headers",
        11,
    );
    assert!(e.to_string().contains("draft10"), "{e}");
}

// ----- telemetry -----

#[test]
fn telemetry_as_the_spec_writes_it() {
    let loaded = ok("telemetry:\n  otlp: { endpoint: \"http://127.0.0.1:4318\", protocol: http }\n  sample: 0.01\n  service_name: tollgate\n");
    let t = loaded.config.telemetry.expect("telemetry");
    assert_eq!(
        t.otlp.endpoint.to_string(),
        "http://127.0.0.1:4318/v1/traces",
        "an HTTP endpoint without a path takes OTLP's traces path"
    );
    assert_eq!(t.otlp.protocol, OtlpProtocol::Http);
    assert!(t.otlp.headers.is_empty());
    assert_eq!((t.sample, t.service_name.as_str()), (0.01, "tollgate"));

    let loaded = ok("telemetry:\n  otlp:\n    endpoint: \"http://collector:4317\"\n    protocol: grpc\n    headers: { Authorization: \"Bearer x\", x-scope: a }\n");
    let t = loaded.config.telemetry.expect("telemetry");
    assert_eq!(t.otlp.endpoint.to_string(), "http://collector:4317/");
    assert_eq!(t.otlp.protocol, OtlpProtocol::Grpc);
    assert_eq!(t.otlp.headers.len(), 2);
    assert_eq!(
        t.otlp.headers[0].0,
        HeaderName::from_static("authorization")
    );
    assert_eq!((t.sample, t.service_name.as_str()), (1.0, "tollgate"));
    let kept = ok("telemetry:\n  otlp: { endpoint: \"http://c:4318/custom/traces\" }\n");
    assert_eq!(
        kept.config.telemetry.unwrap().otlp.endpoint.to_string(),
        "http://c:4318/custom/traces",
        "a path given is the URL spans are posted to"
    );
    assert!(ok("").config.telemetry.is_none());
}

#[test]
fn telemetry_errors_name_the_field_and_line() {
    let e = err_at("telemetry:\n  sample: 0.5\n", "telemetry.otlp", 2);
    assert!(e.message.contains("required"), "{e}");
    err_at(
        "telemetry:\n  otlp: { protocol: grpc }\n",
        "telemetry.otlp.endpoint",
        2,
    );
    let e = err_at(
        "telemetry:\n  otlp: { endpoint: \"https://api.honeycomb.io\" }\n",
        "telemetry.otlp.endpoint",
        2,
    );
    assert!(
        e.message.contains("TLS to the collector is not supported"),
        "{e}"
    );
    let e = err_at(
        "telemetry:\n  otlp: { endpoint: \"127.0.0.1:4318\" }\n",
        "telemetry.otlp.endpoint",
        2,
    );
    assert!(e.message.contains("http://"), "{e}");
    let e = err_at(
        "telemetry:\n  otlp: { endpoint: \"http://c:4317/v1/traces\", protocol: grpc }\n",
        "telemetry.otlp.endpoint",
        2,
    );
    assert!(e.message.contains("without a path"), "{e}");
    let e = err("telemetry:\n  otlp: { endpoint: \"http://c\", protocol: thrift }\n");
    assert!(e.message.contains("thrift"), "{e}");
    let e = err_at(
        "telemetry:\n  otlp:\n    endpoint: \"http://c\"\n    headers: { content-type: x }\n",
        "telemetry.otlp.headers.content-type",
        4,
    );
    assert!(e.message.contains("set by the export itself"), "{e}");
    err_at(
        "telemetry:\n  otlp:\n    endpoint: \"http://c\"\n    headers: { \"bad name\": x }\n",
        "telemetry.otlp.headers.bad name",
        4,
    );
    for bad in ["1.5", "-0.1", ".nan"] {
        let e = err_at(
            &format!("telemetry:\n  otlp: {{ endpoint: \"http://c\" }}\n  sample: {bad}\n"),
            "telemetry.sample",
            3,
        );
        assert!(e.message.contains("between 0 and 1"), "{bad}: {e}");
    }
    err_at(
        "telemetry:\n  otlp: { endpoint: \"http://c\" }\n  service_name: \"\"\n",
        "telemetry.service_name",
        3,
    );
}
