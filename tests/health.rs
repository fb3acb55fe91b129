//! Target health (docs/protocols.md): passive ejection and return after `eject`,
//! active probes taking a target down after `unhealthy` failures and back
//! after `healthy` successes, balancing around down targets, 503
//! `no_healthy_upstream` when none is up, health kept across reloads, one
//! prober per pool, and what `GET /upstreams` and
//! `tollgate_upstream_healthy` show.
//!
//! Timings are checked against what the settings allow, with a little room
//! below (the gateway's clock and the test's are read at slightly different
//! moments) and a lot above (a loaded machine runs late, never early).

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::one_route::targets;
use common::{client, config, eventually, ClosedPort, Echo, Gateway, OneRoute};
use serde_json::Value;

/// How long any wait for a health change may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

/// `GET /upstreams`, the entry of upstream `upstream`.
async fn upstream(gw: &Gateway, upstream: &str) -> Value {
    let r = gw.admin_get("/upstreams").await;
    assert_eq!(r.status, 200, "GET /upstreams: {}", r.text());
    let v = r.json();
    v["upstreams"]
        .as_array()
        .and_then(|list| list.iter().find(|u| u["name"] == upstream))
        .cloned()
        .unwrap_or_else(|| panic!("no upstream {upstream} in {v}"))
}

/// `GET /upstreams`, target `url` of upstream `name`.
async fn target(gw: &Gateway, name: &str, url: &str) -> Value {
    let u = upstream(gw, name).await;
    u["targets"]
        .as_array()
        .and_then(|list| list.iter().find(|t| t["url"] == url))
        .cloned()
        .unwrap_or_else(|| panic!("no target {url} in {u}"))
}

/// Waits until target `url` of upstream `name` is `state` (`up`/`down`);
/// returns the target and how long after `from` that was seen.
async fn wait_state(
    gw: &Gateway,
    name: &str,
    url: &str,
    state: &str,
    from: Instant,
) -> (Value, Duration) {
    eventually(PATIENCE, &format!("{url} {state}"), || async {
        let t = target(gw, name, url).await;
        (t["state"] == state).then(|| (t, from.elapsed()))
    })
    .await
}

/// `tollgate_upstream_healthy` for one target.
async fn gauge(gw: &Gateway, name: &str, url: &str) -> Option<f64> {
    gw.metric(&format!(
        "tollgate_upstream_healthy{{upstream=\"{name}\",target=\"{url}\"}}"
    ))
    .await
}

/// Which upstream answered each of `n` requests (`x-upstream`, or the
/// status when the gateway answered).
async fn answered_by(gw: &Gateway, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let r = client::get(gw.addr(), &format!("/r/{i}")).await;
        out.push(match r.upstream().as_str() {
            "" => r.status.as_u16().to_string(),
            name => name.to_owned(),
        });
    }
    out
}

/// Requests `echo` received other than probes of `probe_path`.
fn traffic(echo: &Echo, probe_path: &str) -> usize {
    echo.requests()
        .iter()
        .filter(|r| r.path != probe_path)
        .count()
}

/// The RFC 3339 `since` of a target, as a time.
fn since(t: &Value) -> SystemTime {
    let text = t["since"]
        .as_str()
        .unwrap_or_else(|| panic!("no since in {t}"));
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("since {text:?}: {e}"))
}

/// How far `at` is from now, either way.
fn distance_from_now(at: SystemTime) -> Duration {
    let now = SystemTime::now();
    now.duration_since(at)
        .or_else(|_| at.duration_since(now))
        .unwrap_or_default()
}

/// Two echo targets `a` and `b` behind upstream `u`, never retried, and a
/// catch-all route.
fn two_targets(a: &Echo, b: &Echo) -> OneRoute {
    OneRoute::new()
        .named("all")
        .upstream_at("u", &targets(&[a, b]))
        .upstream_keys("retries: 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_health_ejects_after_failures_and_lets_the_target_back_after_eject() {
    let (a, b) = (Echo::start("a").await, Echo::start("b").await);
    let eject = Duration::from_millis(800);
    let gw = two_targets(&a, &b)
        .upstream_keys("health: { passive: { failures: 3, eject: 800ms } }")
        .start()
        .await;
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(1.0));

    // b answers 502: round robin sends it every other request; its third
    // failure in a row ejects it.
    b.fail_with(502);
    let mut failures = 0;
    for _ in 0..20 {
        if client::get(gw.addr(), "/").await.status == 502 {
            failures += 1;
            if failures == 3 {
                break;
            }
        }
    }
    assert_eq!(failures, 3);
    let ejected = Instant::now();
    let t = target(&gw, "u", &b.url()).await;
    assert_eq!(
        (t["state"].as_str(), t["healthy"].as_bool()),
        (Some("down"), Some(false)),
        "{t}"
    );
    assert_eq!(t["why"], "passive: 3 failed requests in a row", "{t}");
    assert_eq!(t["passive"]["ejections"], 1, "{t}");
    assert!(distance_from_now(since(&t)) < Duration::from_secs(1), "{t}");
    let until = humantime::parse_rfc3339(
        t["passive"]["ejected_until"]
            .as_str()
            .expect("ejected_until"),
    )
    .expect("RFC 3339");
    let left = until.duration_since(since(&t)).expect("until after since");
    assert!(left.abs_diff(eject) < Duration::from_millis(5), "{t}");
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(0.0));
    let settings = upstream(&gw, "u").await;
    assert_eq!(
        settings["passive"],
        serde_json::json!({"failures": 3, "eject": "800ms"})
    );
    assert_eq!(settings["active"], Value::Null);
    assert_eq!(settings["healthy"], 1);

    // While it is out, everything goes to a.
    b.recover();
    let seen = answered_by(&gw, 10).await;
    assert!(seen.iter().all(|u| u == "a"), "{seen:?}");
    assert!(
        ejected.elapsed() < eject,
        "the requests took too long to tell"
    );

    // It is back once `eject` has passed, not before.
    let (t, took) = wait_state(&gw, "u", &b.url(), "up", ejected).await;
    eprintln!("passive: back after {took:?} (eject {eject:?})");
    assert!(
        took >= eject - Duration::from_millis(50),
        "back after {took:?}"
    );
    assert!(took < eject + Duration::from_secs(1), "back after {took:?}");
    assert_eq!(t["why"], Value::Null, "{t}");
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(1.0));
    let seen = answered_by(&gw, 4).await;
    assert!(seen.iter().any(|u| u == "b"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_takes_a_failing_target_down_and_brings_it_back() {
    let (a, b) = (Echo::start("a").await, Echo::start("b").await);
    let interval = Duration::from_millis(150);
    let gw = two_targets(&a, &b)
        .upstream_keys(
            "health: { active: { path: /ping, interval: 150ms, timeout: 100ms, healthy: 2, unhealthy: 3 } }",
        )
        .start()
        .await;
    let settings = upstream(&gw, "u").await;
    assert_eq!(
        settings["active"],
        serde_json::json!({"path": "/ping", "interval": "150ms", "timeout": "100ms", "healthy": 2, "unhealthy": 3})
    );
    // Probes are GET /ping to every target.
    eventually(PATIENCE, "two probes of each target", || async {
        (a.count_path("/ping") >= 2 && b.count_path("/ping") >= 2).then_some(())
    })
    .await;
    let probe = b
        .requests()
        .into_iter()
        .find(|r| r.path == "/ping")
        .expect("a probe");
    assert_eq!(probe.method, "GET");
    assert_eq!(probe.host.as_deref(), Some(b.addr().to_string().as_str()));
    assert_eq!(target(&gw, "u", &b.url()).await["state"], "up");

    // b starts answering 500: down after 3 failed probes, 2 intervals at
    // least after the first.
    b.fail_with(500);
    let failing = Instant::now();
    let (t, took) = wait_state(&gw, "u", &b.url(), "down", failing).await;
    eprintln!("active: down after {took:?} (interval {interval:?}, unhealthy 3)");
    assert!(
        took >= 2 * interval - Duration::from_millis(50),
        "down after {took:?}"
    );
    assert!(
        took < 3 * interval + Duration::from_secs(1),
        "down after {took:?}"
    );
    let why = t["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("active: ") && why.ends_with(" failed probes in a row (last: status 500)"),
        "{t}"
    );
    assert_eq!(t["active"]["last_error"], "status 500", "{t}");
    assert!(t["active"]["failures"].as_u64() >= Some(3), "{t}");
    assert!(distance_from_now(since(&t)) < Duration::from_secs(1), "{t}");
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(0.0));
    assert_eq!(gauge(&gw, "u", &a.url()).await, Some(1.0));

    // Traffic goes to a only.
    let before = traffic(&b, "/ping");
    let seen = answered_by(&gw, 10).await;
    assert!(seen.iter().all(|u| u == "a"), "{seen:?}");
    assert_eq!(traffic(&b, "/ping"), before, "b got traffic while down");

    // b recovers: up after 2 passing probes, one interval at least after
    // the first.
    b.recover();
    let recovering = Instant::now();
    let (t, took) = wait_state(&gw, "u", &b.url(), "up", recovering).await;
    eprintln!("active: up after {took:?} (interval {interval:?}, healthy 2)");
    assert!(
        took >= interval - Duration::from_millis(50),
        "up after {took:?}"
    );
    assert!(
        took < 2 * interval + Duration::from_secs(1),
        "up after {took:?}"
    );
    assert_eq!(t["why"], Value::Null, "{t}");
    assert_eq!(
        t["active"]["last_error"], "status 500",
        "the last failure is kept: {t}"
    );
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(1.0));
    let seen = answered_by(&gw, 4).await;
    assert!(seen.iter().any(|u| u == "b"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_target_down_the_answer_is_503_no_healthy_upstream() {
    let echo = Echo::start("e").await;
    let closed = ClosedPort::bind();
    let dead = format!("http://{}", closed.addr());
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("u", &format!("[\"{dead}\", \"{}\"]", echo.url()))
        .upstream_keys(
            "health: { active: { interval: 100ms, timeout: 50ms, healthy: 1, unhealthy: 2 } }",
        )
        .start()
        .await;
    // The target that stops listening goes down by itself.
    let (t, _) = wait_state(&gw, "u", &dead, "down", Instant::now()).await;
    let why = t["why"].as_str().unwrap_or_default();
    assert!(why.contains("(last: connect: "), "{t}");
    // The other one answers 503 to its probes.
    echo.fail_with(503);
    wait_state(&gw, "u", &echo.url(), "down", Instant::now()).await;
    assert_eq!(upstream(&gw, "u").await["healthy"], 0);
    client::get(gw.addr(), "/x")
        .await
        .assert_error(503, "no_healthy_upstream");
    assert_eq!(
        traffic(&echo, "/healthz"),
        0,
        "a request reached a down target"
    );
    // One probe passing is enough here.
    echo.recover();
    wait_state(&gw, "u", &echo.url(), "up", Instant::now()).await;
    let r = client::get(gw.addr(), "/x").await;
    assert_eq!((r.status.as_u16(), r.upstream()), (200, "e".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_kept_across_a_reload_that_changes_the_upstream() {
    let (a, b, c) = (
        Echo::start("a").await,
        Echo::start("b").await,
        Echo::start("c").await,
    );
    // Passive health on u (a long ejection), active on v (a slow interval:
    // a new pool starting from nothing would show the target up until its
    // first probe, and then since that probe). b keeps failing throughout.
    let template = |timeout: &str, extra_target: &str| {
        config(&format!(
            r#"
            upstreams:
              u:
                targets: ["{a}", "{b}"{extra_target}]
                retries: 0
                timeout: {timeout}
                health: {{ passive: {{ failures: 1, eject: 1m }} }}
              v:
                targets: ["{b}"]
                timeout: {timeout}
                health: {{ active: {{ interval: 2s, timeout: 500ms, healthy: 1, unhealthy: 1 }} }}
            routes:
              - name: v
                match: {{ path: /v }}
                upstream: v
              - name: all
                match: {{ path: / }}
                upstream: u
            "#,
            a = a.url(),
            b = b.url(),
        ))
    };
    b.fail_with(500);
    let gw = Gateway::start(&template("10s", "")).await;
    // v's first probe (at start) takes b down for v.
    let (v_before, _) = wait_state(&gw, "v", &b.url(), "down", Instant::now()).await;
    // One failed request ejects b from u.
    let mut statuses = Vec::new();
    while !statuses.contains(&500) {
        statuses.push(client::get(gw.addr(), "/").await.status.as_u16());
        assert!(statuses.len() < 5, "{statuses:?}");
    }
    let u_before = target(&gw, "u", &b.url()).await;
    assert_eq!(u_before["state"], "down", "{u_before}");

    // Another setting of both upstreams changes, and u gets a third target:
    // both pools are rebuilt.
    gw.rewrite_config(&template("20s", &format!(", \"{}\"", c.url())));
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.generation().await, 2);

    let u_after = target(&gw, "u", &b.url()).await;
    assert_eq!(
        (
            &u_after["state"],
            &u_after["why"],
            &u_after["since"],
            &u_after["passive"]
        ),
        (
            &u_before["state"],
            &u_before["why"],
            &u_before["since"],
            &u_before["passive"]
        ),
        "{u_after}"
    );
    let v_after = target(&gw, "v", &b.url()).await;
    assert_eq!(
        (&v_after["state"], &v_after["since"]),
        (&v_before["state"], &v_before["since"]),
        "{v_after}"
    );
    assert!(v_after["active"]["probes"].as_u64() >= v_before["active"]["probes"].as_u64());
    assert_eq!(gauge(&gw, "u", &b.url()).await, Some(0.0));
    assert_eq!(
        gauge(&gw, "u", &c.url()).await,
        Some(1.0),
        "the new target is up"
    );
    let seen = answered_by(&gw, 6).await;
    assert!(seen.iter().all(|u| u == "a" || u == "c"), "{seen:?}");
    assert!(seen.iter().any(|u| u == "c"), "{seen:?}");

    // A reload removing a target drops its gauge.
    gw.rewrite_config(&template("20s", ""));
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    assert_eq!(gauge(&gw, "u", &c.url()).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_prober_per_pool_however_many_reloads() {
    let echo = Echo::start("e").await;
    let template = |retries: u32, with_upstream: bool| {
        if !with_upstream {
            return config("");
        }
        OneRoute::new()
            .named("all")
            .upstream_at("u", &targets(&[&echo]))
            .upstream_keys(&format!("retries: {retries}"))
            .upstream_keys("health: { active: { interval: 100ms, timeout: 50ms } }")
            .config()
    };
    let gw = Gateway::start(&template(0, true)).await;
    // Reloads that rebuild the pool (retries changed) and that keep it.
    for retries in [1, 1, 0, 0, 2, 2] {
        gw.rewrite_config(&template(retries, true));
        assert_eq!(gw.admin_post("/reload").await.status, 200);
    }
    // Let the checkers of the pools replaced see that they are retired.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let window = Duration::from_secs(1);
    let first = echo.count_path("/healthz");
    tokio::time::sleep(window).await;
    let probes = echo.count_path("/healthz") - first;
    eprintln!("probes in {window:?} at a 100ms interval after 6 reloads: {probes}");
    assert!((5..=12).contains(&probes), "{probes} probes in {window:?}");

    // Without the upstream, probing stops.
    gw.rewrite_config(&template(0, false));
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = echo.count_path("/healthz");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        echo.count_path("/healthz"),
        after,
        "a removed upstream is still probed"
    );
}
