//! The `redis_cluster` store against a real Redis Cluster (six
//! `redis-server --cluster-enabled yes`, three masters with a replica each,
//! made by `redis-cli --cluster create`): exactness over three gateways for
//! every algorithm, all-or-nothing across slots (the refund), lockouts,
//! resets and inspection, `FUNCTION FLUSH` on a node, and a master killed or
//! failed over under load.
//!
//! The tests that do not break the cluster share one (each with its own
//! key prefix); the failover test makes its own.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::cluster::{info, RedisCluster};
use common::failover::{self, STORE_TIMEOUT};
use common::limits::*;
use common::{config, dedent, Echo, Gateway};

/// The cluster the non-destructive tests share.
fn shared() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A gateway config on `cluster`, keys under `prefix`, with `timeout` and
/// `on_error`, an upstream `e` when given, then `body`.
fn template(
    cluster: &RedisCluster,
    prefix: &str,
    timeout: &str,
    on_error: &str,
    echo: Option<&Echo>,
    body: &str,
) -> String {
    let mut rest = format!(
        "store: {{ backend: redis_cluster, urls: {}, prefix: {prefix}, timeout: {timeout}, on_error: {on_error} }}\n",
        cluster.seeds_yaml()
    );
    if let Some(e) = echo {
        rest.push_str(&format!(
            "upstreams:\n  e: {{ targets: [\"{}\"], retries: 0 }}\n",
            e.url()
        ));
    }
    rest.push_str(&dedent(body));
    config(&rest)
}

/// Every key under `prefix` on every master, with `CLUSTER KEYSLOT`.
fn keys_with_slots(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for m in cluster.masters() {
        let keys = info(m, &["KEYS", &format!("{prefix}:*")]).unwrap_or_default();
        for k in keys.lines().filter(|k| !k.is_empty()) {
            let slot: u16 = info(m, &["CLUSTER", "KEYSLOT", k])
                .and_then(|s| s.parse().ok())
                .expect("KEYSLOT");
            out.push((k.to_owned(), slot));
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// Exactness: 3 instances, 300 concurrent requests, a limit of 100
// ---------------------------------------------------------------------------

async fn exactly_100_of_300_on_the_cluster(prefix: &str, limit: &str, path: &'static str) {
    let cluster = shared();
    let echo = Echo::start("e").await;
    let t = template(
        cluster,
        prefix,
        "3s",
        "deny",
        Some(&echo),
        &format!(
            r#"
            limits:
              x: {limit}
            routes:
              - {{ name: r, match: {{ path: / }}, upstream: e, limits: [x] }}
            "#
        ),
    );
    let gws = [
        Gateway::start(&t).await,
        Gateway::start(&t).await,
        Gateway::start(&t).await,
    ];
    common::limits::exactly_100_of_300(&gws, &echo, path, limit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_on_the_cluster_for_every_algorithm() {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(60)).await;
    for (i, (limit, path)) in [
        (
            "{ algorithm: fixed_window, limit: 100, window: 1h, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: sliding_window, limit: 100, window: 1h, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: sliding_log, limit: 100, window: 1h, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: token_bucket, rate: 100/h, burst: 100, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: gcra, rate: 100/h, burst: 100, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: leaky_bucket, rate: 100/h, burst: 100, key: route }",
            "/delay/0",
        ),
        (
            "{ algorithm: concurrency, limit: 100, key: route }",
            "/delay/4000",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        exactly_100_of_300_on_the_cluster(&format!("ex{i}"), limit, path).await;
    }
}

// ---------------------------------------------------------------------------
// All or nothing across slots
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_on_one_slot_takes_nothing_on_the_others() {
    let cluster = shared();
    let prefix = "aon";
    let t = template(
        cluster,
        prefix,
        "2s",
        "deny",
        None,
        r#"
        limits:
          wide: { algorithm: token_bucket, rate: 1/m, burst: 5, key: client_ip }
          narrow: { algorithm: sliding_log, limit: 2, window: 1m, key: client_ip }
          gw: { algorithm: gcra, rate: 1/m, burst: 5, key: global }
          fw: { algorithm: fixed_window, limit: 5, window: 1h, key: route }
        routes:
          - { name: both, match: { path: /both }, respond: { status: 200 }, limits: [wide, narrow, gw, fw] }
          - { name: wide, match: { path: /wide }, respond: { status: 200 }, limits: [wide] }
        "#,
    );
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    for (w, n) in [(4, 1), (3, 0)] {
        let r = ca.get("/both").await;
        assert_ok(&r);
        assert_eq!((remaining(&r, "wide"), remaining(&r, "narrow")), (w, n));
        assert_eq!((remaining(&r, "gw"), remaining(&r, "fw")), (w, w));
    }
    // The four limits' keys are on four slots (else this proves nothing).
    let slots: std::collections::BTreeSet<u16> = keys_with_slots(cluster, prefix)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(slots.len(), 4, "the limits' keys hash to four slots");
    for i in 0..3 {
        let r = cb.get("/both").await;
        assert_rejected(&r, "rate_limited", "narrow");
        assert_eq!(
            (
                remaining(&r, "wide"),
                remaining(&r, "gw"),
                remaining(&r, "fw")
            ),
            (3, 3, 3),
            "rejection #{i}: the other slots answer as not consumed"
        );
    }
    for (limit, key) in [("wide", "127.0.0.1"), ("gw", "global"), ("fw", "both")] {
        assert_eq!(
            limit_state(&a, limit, key).await["remaining"],
            3,
            "{limit}: the rejected requests kept nothing on its slot"
        );
    }
    for want in [2, 1, 0] {
        let r = cb.get("/wide").await;
        assert_ok(&r);
        assert_eq!(remaining(&r, "wide"), want);
    }
    assert_rejected(&ca.get("/wide").await, "rate_limited", "wide");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_across_slots_take_exactly_what_passed() {
    let cluster = shared();
    let prefix = "aonc";
    ensure_room(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let t = template(
        cluster,
        prefix,
        "3s",
        "deny",
        None,
        r#"
        limits:
          tight: { algorithm: fixed_window, limit: 100, window: 1h, key: global }
          loose: { algorithm: sliding_window, limit: 1000, window: 1h, key: route }
          lease: { algorithm: concurrency, limit: 1000, key: route }
          bucket: { algorithm: token_bucket, rate: 1000/h, burst: 1000, key: route }
        routes:
          - { name: r, match: { path: / }, respond: { status: 200 }, limits: [loose, lease, bucket, tight] }
        "#,
    );
    let gws = [
        Gateway::start(&t).await,
        Gateway::start(&t).await,
        Gateway::start(&t).await,
    ];
    let callers: Vec<Caller> = gws.iter().map(|g| Caller::new(g.addr())).collect();
    let statuses: Vec<u16> = spread(&callers, "/", 300)
        .await
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(
        tally(statuses),
        [(200, 100), (429, 200)].into_iter().collect()
    );
    // Exactly the 100 that passed count on the other slots.
    let loose = limit_state(&gws[0], "loose", "r").await;
    assert_eq!(loose["remaining"], 900, "{loose}");
    let bucket = limit_state(&gws[1], "bucket", "r").await;
    assert_eq!(bucket["remaining"], 900, "{bucket}");
    // Every lease is back (the responses ended, and the rejected requests'
    // were refunded).
    let lease = limit_state(&gws[2], "lease", "r").await;
    assert_eq!(lease["remaining"], 1000, "{lease}");
}

// ---------------------------------------------------------------------------
// Lockouts, resets and inspection on the cluster
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_are_listed_and_reset_on_every_instance() {
    let cluster = shared();
    let t = template(
        cluster,
        "lko",
        "2s",
        "deny",
        None,
        r#"
        limits:
          lk:
            algorithm: token_bucket
            rate: 1/m
            burst: 1
            key: client_ip
            lockout: { after: 1, duration: 60s }
        routes:
          - { name: r, match: { path: / }, respond: { status: 200 }, limits: [lk] }
        "#,
    );
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    assert_ok(&ca.get("/").await);
    assert_eq!(assert_rejected(&ca.get("/").await, "locked_out", "lk"), 60);
    assert_rejected(&cb.get("/").await, "locked_out", "lk");
    // The index entry is written off the request path.
    let t0 = Instant::now();
    while lockouts(&b).await["count"] != 1 {
        assert!(t0.elapsed() < Duration::from_secs(2), "B lists the lockout");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lockouts(&a).await["count"], 1);
    assert_eq!(limit_state(&b, "lk", "127.0.0.1").await["locked"], true);

    reset_limit(&b, "lk", "127.0.0.1").await;
    unlocked_within_a_second(&ca, "/", &[], "lk").await;
    assert_eq!(lockouts(&a).await["count"], 0);
    assert_eq!(limit_state(&a, "lk", "127.0.0.1").await["locked"], false);
}

// ---------------------------------------------------------------------------
// The library on every primary
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_on_a_node_heals_by_itself() {
    let cluster = shared();
    let t = template(
        cluster,
        "ff",
        "2s",
        "deny",
        None,
        r#"
        limits:
          l: { algorithm: token_bucket, rate: 100/h, burst: 100, key: header:x-k }
        routes:
          - { name: r, match: { path: / }, respond: { status: 200 }, limits: [l] }
        "#,
    );
    let gw = Gateway::start(&t).await;
    let c = Caller::new(gw.addr());
    // Forty clients: their keys land on every master.
    let clients: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    for k in &clients {
        assert_ok(&c.get_h("/", &[("x-k", k)]).await);
    }
    for m in cluster.masters() {
        assert_eq!(info(m, &["FUNCTION", "FLUSH"]).as_deref(), Some("OK"));
    }
    for k in &clients {
        let r = c.get_h("/", &[("x-k", k)]).await;
        assert_eq!(r.status, 200, "after FUNCTION FLUSH: {}", r.text());
        assert_eq!(remaining(&r, "l"), 98, "decided on Redis, counted once");
    }
}

// ---------------------------------------------------------------------------
// Failover under load
// ---------------------------------------------------------------------------

async fn failover(kill: bool) {
    let cluster = RedisCluster::start();
    let t = template(
        &cluster,
        "fo",
        &format!("{}ms", STORE_TIMEOUT.as_millis()),
        "local",
        None,
        failover::LIMITS,
    );
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    assert!(failover::shared_again(&ca, &cb).await);

    // Load: 8 clients' keys (on every master), each request timed.
    let load = failover::Load::start(&ca, &cb, 8);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let victim = &cluster.masters()[0];
    let replica = cluster.replica_of(victim);
    let t0 = Instant::now();
    if kill {
        victim.kill();
    } else {
        assert_eq!(
            info(replica, &["CLUSTER", "FAILOVER"]).as_deref(),
            Some("OK")
        );
    }
    // The replica takes over (node timeout 1 s + election). A manual
    // failover that Redis gave up on (the replica did not catch up within
    // its 5 s on a loaded machine) is asked again.
    let mut asked = Instant::now();
    let promoted = loop {
        if info(replica, &["ROLE"]).is_some_and(|r| r.starts_with("master")) {
            break t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no promotion");
        if !kill && asked.elapsed() > Duration::from_secs(6) {
            let _ = info(replica, &["CLUSTER", "FAILOVER"]);
            asked = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    failover::recovered(
        &format!("cluster failover (kill: {kill})"),
        &ca,
        &cb,
        load,
        t0,
        promoted,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_under_load() {
    failover(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_failover_under_load() {
    failover(false).await;
}
