//! The `redis_cluster` store against a real Redis Cluster (six
//! `redis-server --cluster-enabled yes`, three masters with a replica each,
//! made by `redis-cli --cluster create`): exactness over three gateways for
//! every algorithm, all-or-nothing across slots (the refund), probes that
//! ask every slot and write nothing, lockouts, resets and inspection,
//! `FUNCTION FLUSH` on a node, a master killed or failed over under load,
//! and a cost settlement's one call to its key's slot.
//!
//! The tests that do not break the cluster share one (each with its own
//! key prefix); the failover test makes its own.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::cluster::{info, RedisCluster};
use common::failover::{self, STORE_TIMEOUT};
use common::limits::*;
use common::{config_with_store, Echo, Gateway, OneRoute, Resp};

/// The cluster the non-destructive tests share.
fn shared() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// The store on `cluster`, keys under `prefix`, with `timeout` and
/// `on_error`.
fn store(cluster: &RedisCluster, prefix: &str, timeout: &str, on_error: &str) -> String {
    format!(
        "{{ backend: redis_cluster, urls: {}, prefix: {prefix}, timeout: {timeout}, on_error: {on_error} }}",
        cluster.seeds_yaml()
    )
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
    let store = store(shared(), prefix, "3s", "deny");
    common::limits::exactly_100_of_300(&store, limit, path).await;
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

/// A gateway on `cluster` (keys under `prefix`) whose route `both` is under
/// four limits on four slots (`narrow` allows 2 a minute, the others 5),
/// and `more_routes` (one YAML list item a line).
fn four_slots(cluster: &RedisCluster, prefix: &str, more_routes: &str) -> String {
    let routes = format!(
        "{}\n  {}",
        "- { name: both, match: { path: /both }, respond: { status: 200 }, limits: [wide, narrow, gw, fw] }",
        more_routes
    );
    config_with_store(
        &store(cluster, prefix, "2s", "deny"),
        &format!(
            r#"
limits:
  wide: {{ algorithm: token_bucket, rate: 1/m, burst: 5, key: client_ip }}
  narrow: {{ algorithm: sliding_log, limit: 2, window: 1m, key: client_ip }}
  gw: {{ algorithm: gcra, rate: 1/m, burst: 5, key: global }}
  fw: {{ algorithm: fixed_window, limit: 5, window: 1h, key: route }}
routes:
  {routes}
"#
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_on_one_slot_takes_nothing_on_the_others() {
    let cluster = shared();
    let prefix = "aon";
    let t = four_slots(
        cluster,
        prefix,
        "- { name: wide, match: { path: /wide }, respond: { status: 200 }, limits: [wide] }",
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

/// Every key under `prefix` on every master: its slot, type, value and
/// expiry instant.
fn stored(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16, String)> {
    keys_with_slots(cluster, prefix)
        .into_iter()
        .map(|(k, slot)| {
            let owner = cluster.owner(slot);
            let kind = info(owner, &["TYPE", &k]).unwrap_or_default();
            let value = match kind.as_str() {
                "zset" => info(owner, &["ZRANGE", &k, "0", "-1", "WITHSCORES"]),
                _ => info(owner, &["GET", &k]),
            };
            let expiry = info(owner, &["PEXPIRETIME", &k]).unwrap_or_default();
            (k, slot, format!("{kind} {expiry} {value:?}"))
        })
        .collect()
}

/// `POST /probe` on a cluster: each slot is asked (read-only), a rejection
/// on one slot makes the others' answers not consumed, as a decision
/// would, and nothing is written on any slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_ask_every_slot_and_write_nothing() {
    ensure_room(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let cluster = shared();
    let prefix = "prb";
    let t = four_slots(cluster, prefix, "");
    let gw = Gateway::start(&t).await;
    let c = Caller::new(gw.addr());
    let body = r#"{"path": "/both", "client": "127.0.0.1"}"#;
    let said = |a: &serde_json::Value| -> Vec<(String, u64)> {
        a["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let decision = l["decision"].as_str().unwrap().to_owned();
                (decision, l["figures"]["r"].as_u64().unwrap())
            })
            .collect()
    };
    let allowed = |r: u64| ("allowed".to_owned(), r);
    let a = probe(&gw, body).await;
    assert_eq!(said(&a), [allowed(4), allowed(1), allowed(4), allowed(4)]);
    assert!(
        stored(cluster, prefix).is_empty(),
        "a probe of new keys makes none"
    );
    for _ in 0..2 {
        assert_ok(&c.get("/both").await);
    }
    let slots: std::collections::BTreeSet<u16> = keys_with_slots(cluster, prefix)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(slots.len(), 4, "the limits' keys hash to four slots");
    let before = stored(cluster, prefix);
    let not_consumed = |r: u64| ("not_consumed".to_owned(), r);
    for _ in 0..20 {
        let a = probe(&gw, body).await;
        assert_eq!(
            said(&a),
            [
                not_consumed(3),
                ("rejected".into(), 0),
                not_consumed(3),
                not_consumed(3)
            ],
            "{a}"
        );
        assert_eq!(
            (&a["status"], &a["limit"]),
            (&serde_json::json!(429), &serde_json::json!("narrow"))
        );
    }
    assert_eq!(
        stored(cluster, prefix),
        before,
        "no key, value or expiry changed"
    );
    let r = c.get("/both").await;
    assert_rejected(&r, "rate_limited", "narrow");
    assert_eq!(
        (
            remaining(&r, "wide"),
            remaining(&r, "gw"),
            remaining(&r, "fw")
        ),
        (3, 3, 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_across_slots_take_exactly_what_passed() {
    let cluster = shared();
    let prefix = "aonc";
    ensure_room(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let t = config_with_store(
        &store(cluster, prefix, "3s", "deny"),
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
    // were refunded). A release runs once its response has been written,
    // which can be just after the client read it: allow it its round trip.
    common::eventually(Duration::from_secs(2), "every lease back", || async {
        (limit_state(&gws[2], "lease", "r").await["remaining"] == 1000).then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------
// Lockouts, resets and inspection on the cluster
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_are_listed_and_reset_on_every_instance() {
    let cluster = shared();
    let t = one_strike()
        .store(&store(cluster, "lko", "2s", "deny"))
        .config();
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
    let t = OneRoute::new()
        .store(&store(cluster, "ff", "2s", "deny"))
        .limit(
            "l",
            "{ algorithm: token_bucket, rate: 100/h, burst: 100, key: header:x-k }",
        )
        .config();
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
    let t = config_with_store(
        &store(
            &cluster,
            "fo",
            &format!("{}ms", STORE_TIMEOUT.as_millis()),
            "local",
        ),
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

// ---------------------------------------------------------------------------
// Resharding under load, and a new primary without the library
// ---------------------------------------------------------------------------

/// `/` counts under `l` (never used up) and `t` (500 per client), on two
/// slots per client; `/l` counts under `l` alone (for the probe).
const MOVING: &str = r#"
limits:
  l: { algorithm: fixed_window, limit: 1000000, window: 1h, key: header:x-k }
  t: { algorithm: fixed_window, limit: 500, window: 1h, key: header:x-k }
routes:
  - { name: l, match: { path: /l }, respond: { status: 200 }, limits: [l] }
  - { name: r, match: { path: / }, respond: { status: 200 }, limits: [l, t] }
"#;

/// `n` client values whose `l` key is on one of `slots`, found through
/// `probe` (a gateway with the same limits under the prefix `pr`: the same
/// limit and value hash to the same slot) by the key each one's first
/// request adds.
async fn clients_on(
    cluster: &RedisCluster,
    probe: &Caller,
    slots: &[u16],
    n: usize,
) -> Vec<String> {
    let keys = || -> std::collections::BTreeSet<String> {
        cluster
            .masters()
            .iter()
            .flat_map(|m| {
                let keys = info(m, &["KEYS", "pr:*"]).unwrap_or_default();
                keys.lines().map(str::to_owned).collect::<Vec<_>>()
            })
            .filter(|k| !k.is_empty())
            .collect()
    };
    let mut seen = keys();
    let mut out = Vec::new();
    for i in 0..400 {
        let v = format!("mover-{i}");
        assert_ok(&probe.get_h("/l", &[("x-k", &v)]).await);
        let now = keys();
        let new: Vec<&String> = now.difference(&seen).collect();
        assert_eq!(new.len(), 1, "one request adds one key");
        let slot: u16 = info(&cluster.nodes[0], &["CLUSTER", "KEYSLOT", new[0]])
            .and_then(|s| s.parse().ok())
            .expect("KEYSLOT");
        if slots.contains(&slot) {
            out.push(v);
            if out.len() == n {
                return out;
            }
        }
        seen = now;
    }
    panic!("fewer than {n} of 400 clients have their key on the slots to move");
}

/// What one client's requests got while slots moved.
#[derive(Default, Debug)]
struct Got {
    admitted: u64,
    rejected: u64,
    unavailable: u64,
}

/// Requests on `/` for each of `clients` (alternating gateways) until
/// `stop`; every answer is 200, 429 by `t`, or the `deny` policy's 503.
fn moving_load(
    callers: &[Caller],
    clients: &[String],
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Got>> {
    clients
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let (c, k, stop) = (callers[i % callers.len()].clone(), k.clone(), stop.clone());
            tokio::spawn(async move {
                let mut got = Got::default();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let r = c.get_h("/", &[("x-k", &k)]).await;
                    match r.status.as_u16() {
                        200 => got.admitted += 1,
                        429 => {
                            assert_rejected(&r, "rate_limited", "t");
                            got.rejected += 1;
                        }
                        503 => {
                            assert!(r.text().contains("limiter_unavailable"), "{}", r.text());
                            got.unavailable += 1;
                        }
                        other => panic!("{k}: {other} {}", r.text()),
                    }
                }
                got
            })
        })
        .collect()
}

/// Moves `n` slots from master `from` to master `to` while `clients` (whose
/// keys are on them) send requests over `callers`; then checks that no
/// client was admitted past `t`'s 500, and that `l` and `t` counted exactly
/// the admitted requests (no call applied twice, the refunds of `l` for
/// `t`'s rejections done). Returns the 503s (the policy's answer when a
/// call could not be decided in time).
async fn move_under_load(
    cluster: &RedisCluster,
    gws: &[Gateway],
    clients: &[String],
    (from, to, n): (usize, usize, usize),
) -> u64 {
    let callers: Vec<Caller> = gws.iter().map(|g| Caller::new(g.addr())).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = moving_load(&callers, clients, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    tokio::task::block_in_place(|| cluster.reshard(from, to, n));
    let took = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut unavailable = 0;
    for (k, h) in clients.iter().zip(load) {
        let got = h.await.expect("load task");
        eprintln!("reshard of {n} slots ({took:?}): {k}: {got:?}");
        unavailable += got.unavailable;
        let t = limit_state(&gws[0], "t", k).await;
        let l = limit_state(&gws[1], "l", k).await;
        let used_t = 500 - t["remaining"].as_u64().expect("t's remaining");
        let used_l = 1_000_000 - l["remaining"].as_u64().expect("l's remaining");
        assert!(used_t <= 500, "{k}: over-admitted: {t}");
        if got.unavailable == 0 {
            // Everything was decided on Redis: the counts are exact.
            assert_eq!(used_t, got.admitted.min(500), "{k}: t counted {t}, {got:?}");
        }
        assert!(
            got.admitted <= used_t,
            "{k}: admitted {got:?} past t's count {t}"
        );
        assert_eq!(used_l, used_t, "{k}: l kept only the admitted ({l}, {t})");
    }
    unavailable
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resharding_and_a_new_primary_under_load() {
    let mut cluster = RedisCluster::start();
    let t = |prefix: &str| config_with_store(&store(&cluster, prefix, "2s", "deny"), MOVING);
    let probe = Gateway::start(&t("pr")).await;
    let gws = [
        Gateway::start(&t("mv")).await,
        Gateway::start(&t("mv")).await,
    ];

    // The 1500 lowest slots of the master serving slot 0 move to another
    // master, then to a master added for them.
    let from = cluster.owner_index(0);
    let to = cluster
        .nodes
        .iter()
        .position(|n| {
            cluster.masters().iter().any(|m| std::ptr::eq(*m, n))
                && !std::ptr::eq(n, &cluster.nodes[from])
        })
        .expect("another master");
    let moving: Vec<u16> = common::cluster::slots(&cluster.nodes[from])[..1500].to_vec();
    let clients = clients_on(&cluster, &Caller::new(probe.addr()), &moving, 8).await;

    let first = move_under_load(&cluster, &gws, &clients[..4], (from, to, 1500)).await;
    for s in [0, 1499] {
        assert_eq!(
            cluster.owner_index(moving[s]),
            to,
            "slot {} moved",
            moving[s]
        );
    }

    // A new primary, which has never seen the library, takes them over.
    let new = tokio::task::block_in_place(|| cluster.add_master());
    assert!(
        !info(&cluster.nodes[new], &["FUNCTION", "LIST"])
            .unwrap_or_default()
            .contains("tollgate"),
        "the new node starts without the library"
    );
    let second = move_under_load(&cluster, &gws, &clients[4..], (to, new, 1500)).await;
    assert_eq!(cluster.owner_index(moving[0]), new);
    assert!(
        info(&cluster.nodes[new], &["FUNCTION", "LIST"])
            .unwrap_or_default()
            .contains("tollgate"),
        "the gateway loaded the library on the new primary"
    );
    // Every client's keys answer from their new home.
    for k in &clients {
        let r = Caller::new(gws[0].addr()).get_h("/l", &[("x-k", k)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    eprintln!("503s (deny policy) while slots moved: {first}, then {second} onto the new primary");
}

// ---------------------------------------------------------------------------
// A slot that cannot answer while another rejects
// ---------------------------------------------------------------------------

/// The slot of the one key that `get` adds under `prefix`.
async fn slot_of_new_key(
    cluster: &RedisCluster,
    prefix: &str,
    get: impl std::future::Future<Output = Resp>,
) -> u16 {
    let before = keys_with_slots(cluster, prefix);
    assert_ok(&get.await);
    let after = keys_with_slots(cluster, prefix);
    let new: Vec<_> = after.iter().filter(|k| !before.contains(k)).collect();
    assert_eq!(new.len(), 1, "one new key: {new:?}");
    new[0].1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_whose_slot_cannot_answer_is_left_out_of_a_rejection() {
    let cluster = RedisCluster::start();
    let t = config_with_store(
        &store(&cluster, "nd", "300ms", "deny"),
        r#"
        limits:
          a: { algorithm: fixed_window, limit: 1, window: 1h, key: header:x-a }
          b: { algorithm: fixed_window, limit: 1000, window: 1h, key: header:x-b }
        routes:
          - { name: a, match: { path: /a }, respond: { status: 200 }, limits: [a] }
          - { name: b, match: { path: /b }, respond: { status: 200 }, limits: [b] }
          - { name: ab, match: { path: /ab }, respond: { status: 200 }, limits: [a, b] }
        "#,
    );
    let gw = Gateway::start(&t).await;
    let c = Caller::new(gw.addr());
    // `a` used up for x-a: A; a value of x-b whose key is on another master.
    let a_slot = slot_of_new_key(&cluster, "nd", c.get_h("/a", &[("x-a", "A")])).await;
    let a_master = cluster.owner_index(a_slot);
    let mut b = None;
    for i in 0..50 {
        let v = format!("B{i}");
        let s = slot_of_new_key(&cluster, "nd", c.get_h("/b", &[("x-b", &v)])).await;
        if cluster.owner_index(s) != a_master {
            b = Some((v, cluster.owner_index(s)));
            break;
        }
    }
    let (b, b_master) = b.expect("a value of x-b on another master");

    // b's master stops answering (shorter than the node timeout: no
    // failover); a's slot rejects.
    cluster.nodes[b_master].stop();
    let t0 = Instant::now();
    let r = c.get_h("/ab", &[("x-a", "A"), ("x-b", &b)]).await;
    let took = t0.elapsed();
    cluster.nodes[b_master].cont();
    assert_rejected(&r, "rate_limited", "a");
    assert_eq!(policy_names(&r), ["a"], "b's figures are unknown: left out");
    assert!(rl_opt(&r, "b").is_none());
    assert!(took < Duration::from_secs(1), "answered in {took:?}");
    // The call that timed out ran when the server resumed: it may have
    // taken b's unit, and it cannot be told apart from one that did not
    // run, so it is not given back (README "Scaling out"). No more.
    cluster.wait_healthy();
    let left = limit_state(&gw, "b", &b).await["remaining"].as_u64();
    assert!(matches!(left, Some(998 | 999)), "{left:?}");
}

// ---------------------------------------------------------------------------
// A refund that fails leaves no concurrency slot taken (docs/scaling-out.md)
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_slot_whose_refund_fails_is_released_once_the_cluster_answers() {
    let cluster = RedisCluster::start();
    let echo = Echo::start("e").await;
    let mut t = OneRoute::new()
        .store(&store(&cluster, "rf", "300ms", "deny"))
        .named("a")
        .matching("{ path: /delay }")
        .upstream(&echo)
        .upstream_keys("retries: 0")
        .limit(
            "conc",
            "{ algorithm: concurrency, limit: 1, key: header:x-a }",
        );
    for b in ["b1", "b2", "b3"] {
        t = t
            .define(
                b,
                &format!("{{ algorithm: fixed_window, limit: 1000, window: 1h, key: header:x-{b} }}"),
            )
            .route(&format!(
                "{{ name: {b}, match: {{ path: /{b} }}, respond: {{ status: 200 }}, limits: [{b}] }}"
            ));
    }
    let t = t
        .route("{ name: ab, match: { path: /ab }, respond: { status: 200 }, limits: [conc, b1, b2, b3] }")
        .config();
    let gw = Gateway::start(&t).await;
    let c = Caller::new(gw.addr());
    // The master of conc's key for x-a: A, seen while a request holds it.
    let held = {
        let c = c.clone();
        tokio::spawn(async move { c.get_h("/delay/1500", &[("x-a", "A")]).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = keys_with_slots(&cluster, "rf");
    assert_eq!(keys.len(), 1, "conc's key while held: {keys:?}");
    let a_master = cluster.owner_index(keys[0].1);
    assert_ok(&held.await.expect("held"));
    // For each b limit, a value whose key is on another master.
    let mut bs = Vec::new();
    for limit in ["b1", "b2", "b3"] {
        let header = format!("x-{limit}");
        let mut found = None;
        for i in 0..50 {
            let v = format!("V{i}");
            let path = format!("/{limit}");
            let s = slot_of_new_key(&cluster, "rf", c.get_h(&path, &[(&header, &v)])).await;
            if cluster.owner_index(s) != a_master {
                found = Some((header.clone(), v, cluster.owner_index(s)));
                break;
            }
        }
        bs.push(found.expect("a value on another master"));
    }
    let paused: std::collections::BTreeSet<usize> = bs.iter().map(|b| b.2).collect();

    // The other masters stall: conc's slot takes the lease, the three b
    // calls time out, and their three failures open the breaker before the
    // refund of conc's lease is sent, so the refund fails without reaching
    // Redis.
    for &m in &paused {
        cluster.nodes[m].stop();
    }
    let mut headers = vec![("x-a", "A")];
    headers.extend(bs.iter().map(|(h, v, _)| (h.as_str(), v.as_str())));
    let r = c.get_h("/ab", &headers).await;
    for &m in &paused {
        cluster.nodes[m].cont();
    }
    assert_eq!(r.status, 503, "on_error: deny while slots cannot answer");
    cluster.wait_healthy();

    // Once the cluster answers again the slot comes free within seconds
    // (the breaker's back-off and a retry round), not at the lease's end
    // (5 minutes).
    let resumed = Instant::now();
    let mut seen = Vec::new();
    loop {
        let r = c.get_h("/delay/0", &[("x-a", "A")]).await;
        seen.push(r.status.as_u16());
        if r.status == 200 {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(8),
            "conc is still taken {:?} after the cluster came back: {seen:?}",
            resumed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "conc free again {:?} after the cluster came back: {seen:?}",
        resumed.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Cost settlements: one call to the key's slot
// ---------------------------------------------------------------------------

/// A cost limit's settlement on the cluster (`tollgate_limit`'s
/// `Limiter::settle`) is one call to its key's slot: the state, the
/// settlement's marker and, for a per-key check, the quota key share the
/// key's hash tag, so the call reaches the master that owns them, applies
/// once, and a replay changes nothing. Two keys on different masters,
/// decided in one request, each settle on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_is_one_call_to_its_keys_slot() {
    use tollgate_limit::algorithm::{fixed_window, AlgoParams, SECOND};
    use tollgate_limit::key::KeyHasher;
    use tollgate_limit::quota::Quota;
    use tollgate_limit::store::redis::{keys, settled_key};
    use tollgate_limit::store::StoreBackend;
    use tollgate_limit::{AlgoState, Check, Decision, Limiter, SettleOutcome, StoreConfig};

    let cluster = shared();
    let config = StoreConfig {
        prefix: "st".into(),
        timeout: Duration::from_secs(3),
        ..StoreConfig::with_backend(StoreBackend::Cluster {
            seeds: cluster.seeds(),
        })
    };
    let limiter = Limiter::new(&config).unwrap();
    let window = fixed_window::Window::Fixed(3600 * SECOND);
    let params = AlgoParams::FixedWindow(fixed_window::Params::new(10_000, window).unwrap());
    // Two tenants whose keys live on different masters.
    let owner = |key: &tollgate_limit::StoreKey| {
        let state = keys("st", key).0;
        let slot = info(cluster.masters()[0], &["CLUSTER", "KEYSLOT", &state])
            .and_then(|s| s.parse().ok())
            .expect("KEYSLOT");
        cluster.owner_index(slot)
    };
    let tenant = |i: usize| {
        KeyHasher::new(b"tokens")
            .value(format!("tenant-{i}").as_bytes())
            .finish()
    };
    let a = tenant(0);
    let b = (1..50)
        .map(tenant)
        .find(|k| owner(k) != owner(&a))
        .expect("a tenant on another master");
    let a_check = Check::new("tokens".into(), a, params.clone()).cost(150);
    let b_check = Check::new("tokens".into(), b, params).cost(150).per_key();
    let own = Quota {
        limit: Some(20_000),
        ..Quota::default()
    };
    limiter.set_quota(&b, Some(own)).await.unwrap();

    let Decision::Allow { figures, .. } =
        limiter.decide(vec![a_check.clone(), b_check.clone()]).await
    else {
        panic!("allowed")
    };
    let within = 15 * 60 * SECOND;
    let refund = figures[0].settlement(&a_check, -120, 1, within).unwrap();
    let charge = figures[1].settlement(&b_check, 300, 1, within).unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(limiter.settle(refund.clone()).await.unwrap());
    }
    seen.push(limiter.settle(charge).await.unwrap());
    assert_eq!(
        seen,
        [
            SettleOutcome::Applied { units: -120 },
            SettleOutcome::Replayed { units: -120 },
            SettleOutcome::Replayed { units: -120 },
            SettleOutcome::Applied { units: 300 },
        ]
    );
    for (check, used) in [(&a_check, 30), (&b_check, 450)] {
        match limiter.inspect(check).await.unwrap().0 {
            Some(AlgoState::FixedWindow(s)) => assert_eq!(s.n, used),
            other => panic!("{other:?}"),
        }
    }
    // Each marker sits with its key's state on the master of its slot,
    // with a TTL.
    for key in [a, b] {
        let master = &cluster.nodes[owner(&key)];
        let marker = settled_key("st", &key, 1);
        let pttl: i64 = info(master, &["PTTL", &marker])
            .and_then(|p| p.parse().ok())
            .expect("PTTL");
        assert!(0 < pttl && pttl <= 900_000, "{marker}: {pttl}");
    }
}
