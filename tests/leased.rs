//! Leased limits (docs/scaling-out.md, "Leased limits") through the real
//! binary, on Redis and on a 3-master Redis Cluster: three gateways
//! sharing one store, 300 concurrent requests against a limit of 100 with
//! leases of 10, admit at most 100 and at least 70 on every leased
//! algorithm; once they stop gracefully, the store holds no leased unit;
//! an outage spends what is leased and then applies `on_error`; a
//! rejection answered locally has the store's figures; `tollgate check`
//! prints the bound, and refuses what cannot be leased.

mod common;

use std::time::Duration;

use futures_util::future::join_all;

use common::client::{self, Resp};
use common::cluster::RedisCluster;
use common::gateway::run_cli;
use common::redis::RedisServer;
use common::{config_with_store, Gateway};

/// The leased algorithms, each a limit of 100 (buckets refill 100 a day:
/// nothing comes back while a test runs).
const ALGORITHMS: [(&str, &str); 4] = [
    ("fixed", "algorithm: fixed_window, limit: 100, window: 1h"),
    (
        "sliding",
        "algorithm: sliding_window, limit: 100, window: 1h",
    ),
    (
        "bucket",
        "algorithm: token_bucket, rate: 100/1d, burst: 100",
    ),
    ("gcra", "algorithm: gcra, rate: 100/1d, burst: 100"),
];

/// One route per algorithm (`/fixed`, ...), each limited per `x-tenant`
/// by a leased limit of its own.
fn leased_config(store: &str, lease: u64) -> String {
    let mut limits = String::new();
    let mut routes = String::new();
    for (name, params) in ALGORITHMS {
        limits.push_str(&format!(
            "  {name}: {{ {params}, key: \"header:x-tenant\", distribution: {{ lease: {lease}, ttl: 30s }} }}\n"
        ));
        routes.push_str(&format!(
            "  - {{ name: {name}, match: {{ path: /{name} }}, respond: {{ status: 200 }}, limits: [{name}] }}\n"
        ));
    }
    config_with_store(store, &format!("limits:\n{limits}routes:\n{routes}"))
}

fn redis_store(redis: &RedisServer, on_error: &str) -> String {
    format!(
        "{{ backend: redis, url: \"{}\", prefix: lease, timeout: 2s, on_error: {on_error} }}",
        redis.url()
    )
}

fn cluster_store(cluster: &RedisCluster) -> String {
    format!(
        "{{ backend: redis_cluster, urls: {}, prefix: leasec, timeout: 2s, on_error: deny }}",
        cluster.seeds_yaml()
    )
}

async fn get(gw: &Gateway, path: &str, tenant: &str) -> Resp {
    client::get_with(gw.addr(), path, &[("x-tenant", tenant)]).await
}

/// The `r` and `t` of a response's `RateLimit` field.
fn r_and_t(resp: &Resp) -> (u64, u64) {
    let field = resp.header("ratelimit").expect("a RateLimit field");
    let value = |name: &str| -> u64 {
        let at = field.find(&format!(";{name}=")).expect(field) + name.len() + 2;
        field[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (value("r"), value("t"))
}

/// 3 gateways x 100 concurrent requests of one tenant per algorithm, 5
/// trials (a tenant each): admitted in [70, 100] every time; then 3
/// requests of another tenant on each (leases of 10 part-spent); after the
/// gateways stop (SIGTERM), a fresh gateway reads exactly 100 - admitted
/// left of every tenant: nothing stayed leased.
async fn the_fleet_admits_at_most_the_limit(store: &str) {
    let config = leased_config(store, 10);
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(Gateway::start(&config).await);
    }
    let mut admitted = Vec::new();
    for (name, _) in ALGORITHMS {
        for trial in 0..5 {
            let tenant = format!("{name}-{trial}");
            let path = format!("/{name}");
            let answers = join_all(fleet.iter().flat_map(|gw| {
                let (path, tenant) = (&path, &tenant);
                (0..100).map(move |_| get(gw, path, tenant))
            }))
            .await;
            let ok = answers.iter().filter(|r| r.status == 200).count() as u64;
            let limited = answers.iter().filter(|r| r.status == 429).count() as u64;
            assert_eq!(
                ok + limited,
                300,
                "{name} trial {trial}: only 200s and 429s"
            );
            assert!(
                (70..=100).contains(&ok),
                "{name} trial {trial}: {ok} admitted of 300 against a limit of 100"
            );
            admitted.push((name, tenant, ok));
        }
    }
    // Leases left part-spent: 3 of a lease of 10 on each gateway.
    for (name, _) in ALGORITHMS {
        let tenant = format!("{name}-partial");
        for gw in &fleet {
            for _ in 0..3 {
                assert_eq!(get(gw, &format!("/{name}"), &tenant).await.status, 200);
            }
        }
        admitted.push((name, tenant, 9));
    }
    eprintln!(
        "admitted: {:?}",
        admitted.iter().map(|(_, _, n)| n).collect::<Vec<_>>()
    );
    for mut gw in fleet {
        gw.sigterm();
        let status = gw.wait_exit(Duration::from_secs(20)).await;
        assert!(status.is_some_and(|s| s.success()), "{}", gw.output());
    }
    let reader = Gateway::start(&config).await;
    for (name, tenant, ok) in admitted {
        let state = reader
            .admin_get(&format!("/limits/{name}/{tenant}"))
            .await
            .json();
        assert_eq!(
            state["remaining"].as_u64(),
            Some(100 - ok),
            "{name} {tenant}: {ok} admitted; the store: {state}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_redis_admit_at_most_the_limit_and_strand_nothing() {
    let redis = RedisServer::start();
    the_fleet_admits_at_most_the_limit(&redis_store(&redis, "deny")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_a_cluster_admit_at_most_the_limit_and_strand_nothing() {
    let cluster = RedisCluster::start();
    the_fleet_admits_at_most_the_limit(&cluster_store(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_back_what_leases_did_not_spend() {
    let redis = RedisServer::start();
    let config = leased_config(&redis_store(&redis, "deny"), 10);
    let gw = Gateway::start(&config).await;
    for _ in 0..3 {
        assert_eq!(get(&gw, "/sliding", "t").await.status, 200);
    }
    let remaining = || async {
        gw.admin_get("/limits/sliding/t").await.json()["remaining"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(remaining().await, 90, "the store counts the lease of 10");
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    assert_eq!(remaining().await, 97, "7 unspent went back");
    // A lease taken after the reload, under the new limit.
    gw.rewrite_config(&config.replace("limit: 100, window: 1h", "limit: 50, window: 1h"));
    assert_eq!(get(&gw, "/sliding", "t").await.status, 200);
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    assert_eq!(remaining().await, 96 - 50, "one more, the rest back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockout_strikes_reach_the_store_and_other_limits_keep_all_or_nothing() {
    let redis = RedisServer::start();
    let config = config_with_store(
        &redis_store(&redis, "deny"),
        r#"
        limits:
          leased:
            algorithm: fixed_window
            limit: 5
            window: 1h
            key: "header:x-tenant"
            distribution: { lease: 2, ttl: 30s }
            lockout: { after: 2, duration: 1h }
          strict: { algorithm: fixed_window, limit: 1, window: 1h, key: "header:x-user" }
        routes:
          - { name: both, match: { path: /both }, respond: { status: 200 }, limits: [leased, strict] }
          - { name: one, match: { path: /one }, respond: { status: 200 }, limits: [leased] }
        "#,
    );
    let a = Gateway::start(&config).await;
    let b = Gateway::start(&config).await;
    let with_user = |gw: &Gateway, user: &str| {
        let addr = gw.addr();
        let user = user.to_owned();
        async move { client::get_with(addr, "/both", &[("x-tenant", "t"), ("x-user", &user)]).await }
    };
    // The strict limit rejects the second request of a user: the leased
    // unit it spent goes back to a's lease.
    assert_eq!(with_user(&a, "u").await.status, 200);
    for _ in 0..3 {
        let r = with_user(&a, "u").await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["limit"], "strict");
    }
    // 4 of the 5 units are left for the tenant: 1 admitted with "u", the
    // lease of 2 holds 1, the store 3.
    for i in 0..4 {
        assert_eq!(get(&a, "/one", "t").await.status, 200, "unit {i}");
    }
    // Two rejections of the leased limit, each a strike in the store,
    // lock the tenant out: on the other gateway too.
    assert_eq!(get(&a, "/one", "t").await.status, 429);
    let locked = get(&a, "/one", "t").await;
    assert_eq!(locked.status, 429);
    assert_eq!(locked.json()["error"], "locked_out", "{}", locked.text());
    let elsewhere = get(&b, "/one", "t").await;
    assert_eq!(
        elsewhere.json()["error"],
        "locked_out",
        "{}",
        elsewhere.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_spends_the_lease_then_applies_on_error() {
    let redis = RedisServer::start();
    let gw = Gateway::start(&leased_config(&redis_store(&redis, "deny"), 10)).await;
    assert_eq!(get(&gw, "/fixed", "t").await.status, 200, "takes a lease");
    redis.kill();
    for i in 0..9 {
        assert_eq!(get(&gw, "/fixed", "t").await.status, 200, "leased unit {i}");
    }
    let refused = get(&gw, "/fixed", "t").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["error"], "limiter_unavailable");
    // Another tenant has no lease: on_error at once.
    assert_eq!(get(&gw, "/fixed", "u").await.status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_answered_locally_has_the_stores_figures() {
    let redis = RedisServer::start();
    let config = leased_config(&redis_store(&redis, "deny"), 10);
    let a = Gateway::start(&config).await;
    for i in 0..100 {
        let r = get(&a, "/fixed", "t").await;
        assert_eq!(r.status, 200, "request {i}");
    }
    // The lease is empty and so is the store: the store's rejection...
    let first = get(&a, "/fixed", "t").await;
    assert_eq!(first.status, 429);
    let (r, t) = r_and_t(&first);
    assert_eq!(r, 0);
    // ...then the deny cache's, with the same figures, as another
    // gateway (nothing cached, no lease) hears from the store.
    let cached = get(&a, "/fixed", "t").await;
    assert_eq!(cached.status, 429);
    let b = Gateway::start(&config).await;
    let fresh = get(&b, "/fixed", "t").await;
    assert_eq!(fresh.status, 429);
    for other in [&cached, &fresh] {
        let (r2, t2) = r_and_t(other);
        assert_eq!(r2, 0);
        assert!(t2 <= t && t - t2 <= 2, "t {t} then {t2}");
    }
    // 100 units in leases of at most 10: the first whole, the rest top-ups
    // taken once a lease is half spent (5 units, or what was left).
    let taken = a
        .metric("tollgate_leases_total{limit=\"fixed\",outcome=\"taken\"}")
        .await
        .unwrap();
    assert!((10.0..=20.0).contains(&taken), "{taken} leases taken");
    let empty = a
        .metric("tollgate_leases_total{limit=\"fixed\",outcome=\"empty\"}")
        .await;
    assert_eq!(empty, Some(1.0));
}

#[test]
fn check_prints_the_bound_and_refuses_what_cannot_be_leased() {
    let dir = common::gateway::temp_dir("leased-check");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let redis = "store: { backend: redis, url: \"redis://127.0.0.1:1\" }\n";
    let ok = write(
        "ok.yaml",
        &format!(
            "{redis}limits:\n  api: {{ algorithm: gcra, rate: 100/s, distribution: {{ lease: 20, ttl: 2s }} }}\nroutes:\n  - {{ name: r, match: {{ path: / }}, respond: {{ status: 200 }}, limits: [api] }}\n"
        ),
    );
    let (code, out, err) = run_cli(&["check", "-c", &ok], &[], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lease: api: leases of up to 20 unit(s) for 2s: never over the limit; under-admission at most instances x 20 unit(s), for at most 2s"),
        "{out}"
    );
    let memory = write(
        "memory.yaml",
        "limits:\n  api: { algorithm: gcra, rate: 100/s, distribution: { lease: 20 } }\nroutes:\n  - { name: r, match: { path: / }, respond: { status: 200 }, limits: [api] }\n",
    );
    let (code, out, _) = run_cli(&["check", "-c", &memory], &[], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("warning: distribution: lease on api with backend: memory means exact"),
        "{out}"
    );
    for (limit, field, says) in [
        ("{ algorithm: sliding_log, limit: 5, window: 1m, distribution: { lease: 2 } }", "limits.api.distribution", "leased limits are supported by fixed_window, sliding_window, token_bucket and gcra, not sliding_log"),
        ("{ algorithm: concurrency, limit: 5, distribution: { lease: 2 } }", "limits.api.distribution", "not concurrency"),
        ("{ algorithm: fixed_window, limit: 5000, window: 1h, cost: { reserve: 10, settle: response_bytes }, distribution: { lease: 2 } }", "limits.api.distribution", "cannot have a cost that settles"),
        ("{ algorithm: fixed_window, limit: { default: 5, from: store }, window: 1h, distribution: { lease: 2 } }", "limits.api.distribution", "cannot take its limit from the store"),
        ("{ algorithm: token_bucket, rate: 5/s, max_delay: 1s, distribution: { lease: 2 } }", "limits.api.distribution", "cannot queue"),
        ("{ algorithm: gcra, rate: 5/s, distribution: { lease: 0 } }", "limits.api.distribution.lease", "at least 1"),
        ("{ algorithm: gcra, rate: 5/s, distribution: { lease: 2, ttl: 0s } }", "limits.api.distribution.ttl", "greater than 0"),
        ("{ algorithm: gcra, rate: 5/s, distribution: leased }", "limits.api.distribution", "`exact` or a mapping with fields lease, ttl"),
    ] {
        let bad = write(
            "bad.yaml",
            &format!("{redis}limits:\n  api: {limit}\nroutes:\n  - {{ name: r, match: {{ path: / }}, respond: {{ status: 200 }}, limits: [api] }}\n"),
        );
        let (code, _, err) = run_cli(&["check", "-c", &bad], &[], None);
        assert_ne!(code, 0, "{limit} accepted");
        assert!(err.contains(field) && err.contains(says), "{limit}: {err}");
        assert!(err.contains(":3:"), "{limit}: the line: {err}");
    }
}
