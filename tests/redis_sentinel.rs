//! The `redis_sentinel` store against real Redis Sentinels: a master, its
//! replica and three sentinels (quorum 2), all started here on free ports.
//! Two gateways find the master through the sentinels, share state on it,
//! follow a failover (the master killed under load) by themselves, and a
//! reset on one clears the other's deny cache before and after it.

mod common;

use std::time::{Duration, Instant};

use common::cluster::info;
use common::failover::{self, STORE_TIMEOUT};
use common::limits::*;
use common::redis::RedisServer;
use common::{config_with_store, Gateway};

/// The master's name in the sentinels' config.
const NAME: &str = "tollgate-master";

/// A master, its replica and three sentinels that agree on both.
struct Sentinels {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl Sentinels {
    fn start() -> Sentinels {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(&[
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ]);
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::sentinel(NAME, master.port(), 2))
            .collect();
        let s = Sentinels {
            master,
            replica,
            sentinels,
        };
        // A failover needs the replica in sync, and every sentinel to know
        // the replica and the two other sentinels (hello messages, every
        // 2 s).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !s.settled() {
            assert!(Instant::now() < deadline, "the sentinels did not settle");
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn settled(&self) -> bool {
        let synced = info(&self.replica, &["INFO", "replication"])
            .is_some_and(|i| i.contains("master_link_status:up"));
        let replica = self.replica.port().to_string();
        synced
            && self.sentinels.iter().all(|s| {
                let replicas = info(s, &["SENTINEL", "REPLICAS", NAME]).unwrap_or_default();
                let others = info(s, &["SENTINEL", "SENTINELS", NAME]).unwrap_or_default();
                replicas.lines().any(|l| l == replica)
                    && others.lines().filter(|l| *l == "runid").count() == 2
            })
    }

    /// The master's port as every sentinel names it, if they agree.
    fn named_master(&self) -> Option<u16> {
        let ports: Vec<Option<u16>> = self
            .sentinels
            .iter()
            .map(|s| {
                info(s, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME])
                    .and_then(|a| a.lines().nth(1).and_then(|p| p.parse().ok()))
            })
            .collect();
        match ports[..] {
            [Some(p), ..] if ports.iter().all(|q| *q == Some(p)) => Some(p),
            _ => None,
        }
    }

    /// A gateway config on these sentinels.
    fn config(&self, prefix: &str, body: &str) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port()))
            .collect();
        config_with_store(
            &format!(
                "{{ backend: redis_sentinel, urls: [{}], master_name: {NAME}, prefix: {prefix}, timeout: {}ms, on_error: local }}",
                urls.join(", "),
                STORE_TIMEOUT.as_millis(),
            ),
            body,
        )
    }
}

/// The failover limits, and a lockout limit per `x-u` on `/lk`.
const LIMITS: &str = r#"
limits:
  l: { algorithm: fixed_window, limit: 1000000, window: 1h, key: header:x-k }
  p: { algorithm: fixed_window, limit: 1, window: 1h, key: header:x-probe }
  lk:
    algorithm: token_bucket
    rate: 1/m
    burst: 1
    key: header:x-u
    lockout: { after: 1, duration: 60s }
routes:
  - { name: p, match: { path: /p }, respond: { status: 200 }, limits: [p] }
  - { name: lk, match: { path: /lk }, respond: { status: 200 }, limits: [lk] }
  - { name: r, match: { path: / }, respond: { status: 200 }, limits: [l] }
"#;

/// `user` locked out on A (and so in A's deny cache), reset through B's
/// admin API: within a second A lets `user` through again.
async fn reset_reaches_the_other_instance(a: &Gateway, ca: &Caller, b: &Gateway, user: &str) {
    let h = [("x-u", user)];
    assert_ok(&ca.get_h("/lk", &h).await);
    assert_eq!(
        assert_rejected(&ca.get_h("/lk", &h).await, "locked_out", "lk"),
        60
    );
    assert_eq!(limit_state(b, "lk", user).await["locked"], true);
    reset_limit(b, "lk", user).await;
    unlocked_within_a_second(ca, "/lk", &h, "lk").await;
    assert_eq!(limit_state(a, "lk", user).await["locked"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateways_follow_a_sentinel_failover_under_load() {
    let s = Sentinels::start();
    let t = s.config("sn", LIMITS);
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    let t0 = Instant::now();
    while !failover::shared_again(&ca, &cb).await {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the gateways found the master through the sentinels"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The state is on the master the sentinels name.
    assert!(
        !s.master.keys().await.is_empty(),
        "the decisions were made on the master"
    );
    reset_reaches_the_other_instance(&a, &ca, &b, "before").await;

    let load = failover::Load::start(&ca, &cb, 8);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    s.master.kill();
    // Down after 1 s without an answer, then a vote and the promotion.
    let promoted = loop {
        if s.named_master() == Some(s.replica.port())
            && info(&s.replica, &["ROLE"]).is_some_and(|r| r.starts_with("master"))
        {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the sentinels did not promote the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    failover::recovered("sentinel failover", &ca, &cb, load, t0, promoted).await;
    // The reset channel follows the new master too.
    reset_reaches_the_other_instance(&a, &ca, &b, "after").await;
}
