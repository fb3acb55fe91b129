//! Throttling end to end on the memory store (docs/configuration/limits.md,
//! docs/operations.md limit state across reloads, §8 `/limits` and
//! `/lockouts`): every algorithm with real sleeps and margins, cost, shadow
//! mode, keys, exemptions and overrides, the client address behind proxies,
//! lockouts, all-or-nothing, the rate-limit fields and the rejection, the admin
//! API, and reloads.
//!
//! Each test runs its own gateway, so the tests run in parallel. Clients are
//! told apart by their source address (`127.0.0.x`).

mod common;

use std::time::{Duration, Instant};

use common::client::{self, Resp};
use common::limits::*;
use common::{config, eventually, raw, Echo, Gateway, OneRoute};
use http::Method;
use tokio::io::AsyncReadExt;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// `GET path` timed.
async fn timed(c: &Caller, path: &str) -> (Resp, Duration) {
    let t = Instant::now();
    let r = c.get(path).await;
    (r, t.elapsed())
}

// ---------------------------------------------------------------------------
// Algorithms
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_admits_limit_per_aligned_window() {
    let gw = OneRoute::new()
        .limit(
            "fw",
            "{ algorithm: fixed_window, limit: 5, window: 2s, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for round in 0..2 {
        // 100 ms into an epoch-aligned 2 s window.
        next_window(Duration::from_secs(2), MS(100)).await;
        for i in 0..5 {
            let r = c.get("/").await;
            assert_ok(&r);
            let f = rl(&r, "fw");
            assert_eq!((f.q, f.w, f.r), (5, 2, 4 - i), "round {round} #{i}: {f:?}");
            assert!(
                (1..=2).contains(&f.t),
                "t is the time left in the window: {f:?}"
            );
        }
        let r = c.get("/").await;
        let ra = assert_rejected(&r, "rate_limited", "fw");
        assert!(
            (1..=2).contains(&ra),
            "Retry-After is the window's end: {ra}"
        );
        assert_eq!(rl(&r, "fw").r, 0);
    }
    assert_eq!(
        decision_counts(&gw, "r", 12).await,
        counts(&[("allowed", 10), ("rejected", 2)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_weights_the_previous_window() {
    let gw = OneRoute::new()
        .limit(
            "sw",
            "{ algorithm: sliding_window, limit: 10, window: 4s, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    align(Duration::from_secs(4), MS(100)).await;
    for i in 0..10 {
        let r = c.get("/").await;
        assert_ok(&r);
        assert_eq!(remaining(&r, "sw"), 9 - i);
    }
    assert_rejected(&c.get("/").await, "rate_limited", "sw");
    // Just after the boundary the previous window still weighs ~96%: where
    // a fixed window would admit 10, the estimate admits nothing.
    next_window(Duration::from_secs(4), MS(150)).await;
    assert_rejected(&c.get("/").await, "rate_limited", "sw");
    // A quarter into the window: 10 * 0.75 + cur <= 10 admits exactly 2
    // (anywhere in 0.8 s .. 1.2 s).
    align(Duration::from_secs(4), MS(1000)).await;
    let into =
        |w: u64| Duration::from_micros((unix_now().as_micros() % (w as u128 * 1_000_000)) as u64);
    for want in [1, 0] {
        let at = into(4);
        let r = c.get("/").await;
        assert_eq!(
            r.status,
            200,
            "{at:?} into the window: {:?} {}",
            r.headers,
            r.text()
        );
        assert_eq!(remaining(&r, "sw"), want);
    }
    assert_rejected(&c.get("/").await, "rate_limited", "sw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_is_exact_over_the_trailing_window() {
    let gw = OneRoute::new()
        .limit(
            "sl",
            "{ algorithm: sliding_log, limit: 3, window: 2s, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    let t0 = Instant::now();
    for want in [2, 1] {
        let r = c.get("/").await;
        assert_ok(&r);
        assert_eq!(remaining(&r, "sl"), want);
    }
    sleep_until(t0, MS(1000)).await;
    let r = c.get("/").await;
    assert_ok(&r);
    assert_eq!(remaining(&r, "sl"), 0);
    sleep_until(t0, MS(1200)).await;
    // The two of t0 leave the log at t0 + 2 s.
    assert_eq!(assert_rejected(&c.get("/").await, "rate_limited", "sl"), 1);
    sleep_until(t0, MS(2200)).await;
    // The two of t0 are out; the one of t0 + 1 s still counts.
    for want in [1, 0] {
        let r = c.get("/").await;
        assert_ok(&r);
        assert_eq!(remaining(&r, "sl"), want);
    }
    assert_eq!(assert_rejected(&c.get("/").await, "rate_limited", "sl"), 1);
    sleep_until(t0, MS(3200)).await;
    let r = c.get("/").await;
    assert_ok(&r);
    assert_eq!(remaining(&r, "sl"), 0);
    assert_rejected(&c.get("/").await, "rate_limited", "sl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_starts_full_and_refills_continuously() {
    let gw = OneRoute::new()
        .limit(
            "tb",
            "{ algorithm: token_bucket, rate: 5/s, burst: 5, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for i in 0..5 {
        let (r, took) = timed(&c, "/").await;
        assert_ok(&r);
        assert!(took < MS(200), "no delay without max_delay: {took:?}");
        let f = rl(&r, "tb");
        assert_eq!((f.q, f.w, f.r), (5, 1, 4 - i), "{f:?}");
    }
    let t5 = Instant::now();
    // One token comes back every 200 ms.
    assert_eq!(assert_rejected(&c.get("/").await, "rate_limited", "tb"), 1);
    sleep_until(t5, MS(450)).await;
    assert_ok(&c.get("/").await);
    assert_ok(&c.get("/").await);
    assert_rejected(&c.get("/").await, "rate_limited", "tb");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_max_delay_holds_requests_instead_of_rejecting() {
    let gw = OneRoute::new()
        .limit(
            "tbd",
            "{ algorithm: token_bucket, rate: 5/s, burst: 2, max_delay: 500ms, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for _ in 0..2 {
        let (r, took) = timed(&c, "/").await;
        assert_ok(&r);
        assert!(took < MS(150), "the burst passes at once: {took:?}");
    }
    // Bucket empty, a token every 200 ms. #3 (t=0) waits ~200 ms, #4
    // (t=20 ms) has a token reserved at ~400 ms, #5 (t=40 ms) would wait
    // ~560 ms > max_delay and is rejected at once.
    let t0 = Instant::now();
    let spawn = |c: &Caller| {
        let c = c.clone();
        tokio::spawn(async move {
            let r = c.get("/").await;
            (r, t0.elapsed())
        })
    };
    let h3 = spawn(&c);
    sleep_until(t0, MS(20)).await;
    let h4 = spawn(&c);
    sleep_until(t0, MS(40)).await;
    let h5 = spawn(&c);
    let (r5, at5) = h5.await.unwrap();
    let (r3, at3) = h3.await.unwrap();
    let (r4, at4) = h4.await.unwrap();
    assert_ok(&r3);
    assert_ok(&r4);
    assert_rejected(&r5, "rate_limited", "tbd");
    assert!(at5 < MS(250), "the rejection is not delayed: {at5:?}");
    assert!(
        at3 >= MS(150) && at3 <= MS(400),
        "#3 is held until its token (~200 ms): {at3:?}"
    );
    assert!(
        at4 >= MS(340) && at4 <= MS(650),
        "#4 is held until its reserved token (~400 ms): {at4:?}"
    );
    assert!(
        at4 >= at3 + MS(120),
        "#3 {at3:?} and #4 {at4:?} ~200 ms apart"
    );
    assert_eq!(
        decision_counts(&gw, "r", 5).await,
        counts(&[("allowed", 2), ("delayed", 2), ("rejected", 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_answers_with_redis_cell_figures() {
    let gw = OneRoute::new()
        .limit(
            "g",
            "{ algorithm: gcra, rate: 1/s, burst: 3, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    // CL.THROTTLE key 2 1 1 (max_burst = burst - 1): limit 3, remaining
    // 2, 1, 0 (reset_after 1 s, 2 s, 3 s); draft 11's t: the next cell, 1 s.
    for i in 0..3 {
        let r = c.get("/").await;
        assert_ok(&r);
        let f = rl(&r, "g");
        assert_eq!((f.q, f.r, f.t), (3, 2 - i, 1), "#{i}: {f:?}");
    }
    let t3 = Instant::now();
    // retry_after: one emission interval.
    assert_eq!(assert_rejected(&c.get("/").await, "rate_limited", "g"), 1);
    sleep_until(t3, MS(1100)).await;
    let r = c.get("/").await;
    assert_ok(&r);
    assert_eq!(remaining(&r, "g"), 0);
    assert_rejected(&c.get("/").await, "rate_limited", "g");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_policing_admits_what_fits_at_once() {
    let gw = OneRoute::new()
        .limit(
            "lb",
            "{ algorithm: leaky_bucket, rate: 4/s, burst: 3, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for _ in 0..3 {
        let (r, took) = timed(&c, "/").await;
        assert_ok(&r);
        assert!(took < MS(150), "policing never holds a request: {took:?}");
    }
    let t3 = Instant::now();
    assert_rejected(&c.get("/").await, "rate_limited", "lb");
    // 300 ms drain 1.2 units: one more fits.
    sleep_until(t3, MS(300)).await;
    let (r, took) = timed(&c, "/").await;
    assert_ok(&r);
    assert!(took < MS(150), "{took:?}");
    assert_rejected(&c.get("/").await, "rate_limited", "lb");
    assert_eq!(
        decision_counts(&gw, "r", 6).await,
        counts(&[("allowed", 4), ("rejected", 2)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_shaping_spaces_requests_evenly() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          shape: { algorithm: leaky_bucket, rate: 10/s, burst: 5, max_delay: 1s, key: client_ip }
          tight: { algorithm: leaky_bucket, rate: 10/s, burst: 10, max_delay: 250ms, key: client_ip }
        routes:
          - name: shape
            match: { path: /shape }
            respond: { status: 200, body: "ok" }
            limits: [shape]
          - name: tight
            match: { path: /tight }
            respond: { status: 200, body: "ok" }
            limits: [tight]
        "#,
    ))
    .await;
    let c = Caller::new(gw.addr());
    let burst = |path: &'static str, n: usize| {
        let c = c.clone();
        async move {
            let t0 = Instant::now();
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        let r = c.get(path).await;
                        (r.status.as_u16(), t0.elapsed(), r)
                    })
                })
                .collect();
            let mut out = Vec::new();
            for h in hs {
                out.push(h.await.unwrap());
            }
            out
        }
    };
    // Six at once into a bucket of 5 draining at 10/s: five leave at
    // ~0, 100, 200, 300, 400 ms, the sixth does not fit.
    let res = burst("/shape", 6).await;
    assert_eq!(
        tally(res.iter().map(|x| x.0)),
        [(200, 5), (429, 1)].into_iter().collect()
    );
    for (s, at, r) in &res {
        if *s == 429 {
            assert_rejected(r, "rate_limited", "shape");
            assert!(*at < MS(200), "the rejection is immediate: {at:?}");
        }
    }
    let mut times: Vec<Duration> = res.iter().filter(|x| x.0 == 200).map(|x| x.1).collect();
    times.sort();
    assert!(times[0] < MS(100), "the first leaves at once: {times:?}");
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= MS(40) && gap <= MS(220),
            "requests leave evenly spaced (~100 ms): {times:?}"
        );
    }
    assert!(
        times[4] - times[0] >= MS(330) && times[4] - times[0] <= MS(600),
        "the fifth leaves ~400 ms after the first: {times:?}"
    );
    assert_eq!(
        decision_counts(&gw, "shape", 6).await,
        counts(&[("allowed", 1), ("delayed", 4), ("rejected", 1)])
    );

    // max_delay 250 ms: waits of 0, 100, 200 ms are admitted; 300, 400 ms
    // are not.
    let res = burst("/tight", 5).await;
    assert_eq!(
        tally(res.iter().map(|x| x.0)),
        [(200, 3), (429, 2)].into_iter().collect(),
        "{:?}",
        res.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limits_requests_in_flight() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .upstream(&echo)
        .upstream_keys("retries: 0")
        .limit(
            "conc",
            "{ algorithm: concurrency, limit: 2, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    let spawn = |path: &'static str| {
        let c = c.clone();
        tokio::spawn(async move { c.get(path).await })
    };
    let a = spawn("/delay/700");
    let b = spawn("/delay/5000");
    eventually(Duration::from_secs(3), "two requests in flight", || async {
        (echo.in_flight() == 2).then_some(())
    })
    .await;
    // The third is rejected at once.
    let (r, took) = timed(&c, "/delay/0").await;
    assert_rejected(&r, "rate_limited", "conc");
    assert!(took < MS(500), "{took:?}");
    let f = rl(&r, "conc");
    assert_eq!((f.q, f.r), (2, 0), "{f:?}");
    assert_eq!(f.qu.as_deref(), Some("concurrent-requests"), "{f:?}");
    // When one finishes, the next passes.
    let ra = a.await.unwrap();
    assert_ok(&ra);
    assert_eq!(rl(&ra, "conc").qu.as_deref(), Some("concurrent-requests"));
    tokio::time::sleep(MS(100)).await;
    let r = c.get("/delay/0").await;
    assert_ok(&r);
    assert_eq!(
        echo.count(),
        3,
        "the rejected request never reached the upstream"
    );

    // A client that goes away mid-response releases its slot: read the
    // head of a long download, then close the connection.
    let mut conn = raw::connect(gw.addr()).await;
    conn.write(b"GET /download/500000000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, conn.stream.read(&mut buf))
            .await
            .expect("download head timed out")
            .expect("read");
        assert!(n > 0, "closed before the head");
        head.extend_from_slice(&buf[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    // B and the download hold both slots.
    assert_rejected(&c.get("/delay/0").await, "rate_limited", "conc");
    drop(conn);
    let start = Instant::now();
    let mut rejected_after_close = 0;
    loop {
        let r = c.get("/delay/0").await;
        if r.status == 200 {
            break;
        }
        assert_rejected(&r, "rate_limited", "conc");
        rejected_after_close += 1;
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "slot not released 2 s after the client went away ({rejected_after_close} rejections)"
        );
        tokio::time::sleep(MS(50)).await;
    }
    assert_ok(&b.await.unwrap());
}

// ---------------------------------------------------------------------------
// Cost and shadow mode
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_takes_several_units() {
    let gw = OneRoute::new()
        .limit(
            "costly",
            "{ algorithm: token_bucket, rate: 10/m, burst: 10, cost: 3, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for want in [7, 4, 1] {
        let r = c.get("/").await;
        assert_ok(&r);
        let f = rl(&r, "costly");
        assert_eq!((f.q, f.r), (10, want), "{f:?}");
    }
    // One unit left, the request needs three.
    let r = c.get("/").await;
    assert_rejected(&r, "rate_limited", "costly");
    assert_eq!(remaining(&r, "costly"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_and_reports_but_never_rejects() {
    let gw = OneRoute::new()
        .limit(
            "sh",
            "{ algorithm: token_bucket, rate: 1/m, burst: 2, key: client_ip, mode: shadow }",
        )
        .respond(r#"{ status: 200, body: "ok" }"#)
        .start()
        .await;
    let c = Caller::new(gw.addr());
    for want in [1, 0, 0, 0, 0] {
        let r = c.get("/").await;
        assert_ok(&r);
        assert_eq!(r.text(), "ok");
        assert_eq!(remaining(&r, "sh"), want);
        assert!(r.header("retry-after").is_none());
    }
    assert_eq!(
        decision_counts(&gw, "r", 5).await,
        counts(&[("allowed", 2), ("shadow_rejected", 3)])
    );
    assert_eq!(
        metric_with(
            &gw,
            "tollgate_limit_decisions_total",
            &[
                ("route", "r"),
                ("limit", "sh"),
                ("decision", "shadow_rejected")
            ]
        )
        .await,
        Some(3.0)
    );
}

// ---------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------

const TB2: &str = "algorithm: token_bucket, rate: 1/m, burst: 2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ip_is_the_peer_and_untrusted_forwarded_for_is_ignored() {
    let gw = OneRoute::new()
        .limit("ip", &format!("{{ {TB2}, key: client_ip }}"))
        .start()
        .await;
    let (c2, c3, c4) = (
        Caller::from(gw.addr(), 2),
        Caller::from(gw.addr(), 3),
        Caller::from(gw.addr(), 4),
    );
    assert_eq!(c2.statuses("/", &[], 3).await, [200, 200, 429]);
    assert_eq!(c3.statuses("/", &[], 2).await, [200, 200]);
    // 127.0.0.4 claiming to be the exhausted 127.0.0.3 is still .4...
    let xff3 = [("x-forwarded-for", "127.0.0.3")];
    assert_eq!(c4.statuses("/", &xff3, 3).await, [200, 200, 429]);
    // ...and the exhausted .2 cannot become someone fresh.
    let fresh = [
        ("x-forwarded-for", "127.0.0.99"),
        ("x-real-ip", "127.0.0.98"),
        ("forwarded", "for=127.0.0.97"),
    ];
    assert_rejected(&c2.get_h("/", &fresh).await, "rate_limited", "ip");
    assert_eq!(limit_state(&gw, "ip", "127.0.0.4").await["remaining"], 0);
    assert_eq!(limit_state(&gw, "ip", "127.0.0.99").await["remaining"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_forwarded_for_names_the_client() {
    let gw = OneRoute::new()
        .server("trusted_proxies: [\"127.0.0.10/32\", \"127.0.0.11/32\"]")
        .limit("ip", &format!("{{ {TB2}, key: client_ip }}"))
        .start()
        .await;
    let proxy = Caller::from(gw.addr(), 10);
    let a = [("x-forwarded-for", "203.0.113.7")];
    assert_eq!(proxy.statuses("/", &a, 3).await, [200, 200, 429]);
    // Another client behind the same proxy has its own bucket.
    assert_eq!(
        proxy
            .statuses("/", &[("x-forwarded-for", "203.0.113.8")], 1)
            .await,
        [200]
    );
    // Right to left, skipping trusted proxies: still 203.0.113.7.
    assert_rejected(
        &proxy
            .get_h("/", &[("x-forwarded-for", "203.0.113.7, 127.0.0.11")])
            .await,
        "rate_limited",
        "ip",
    );
    // A forged left-most entry does not help: the right-most untrusted
    // address is the client.
    assert_rejected(
        &proxy
            .get_h("/", &[("x-forwarded-for", "198.51.100.1, 203.0.113.7")])
            .await,
        "rate_limited",
        "ip",
    );
    // Without the header, the proxy itself is the client.
    assert_eq!(proxy.statuses("/", &[], 1).await, [200]);
    assert_eq!(limit_state(&gw, "ip", "203.0.113.7").await["remaining"], 0);
    assert_eq!(limit_state(&gw, "ip", "203.0.113.8").await["remaining"], 1);
    assert_eq!(limit_state(&gw, "ip", "127.0.0.10").await["remaining"], 1);
    assert_eq!(limit_state(&gw, "ip", "198.51.100.1").await["remaining"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_query_and_cookie_keys() {
    let gw = Gateway::start(&config(&format!(
        r#"
            limits:
              byh: {{ {TB2}, key: "header:x-user" }}
              byq: {{ {TB2}, key: "query:user" }}
              byc: {{ {TB2}, key: "cookie:sid" }}
            routes:
              - name: h
                match: {{ path: /h }}
                respond: {{ status: 200, body: "ok" }}
                limits: [byh]
              - name: q
                match: {{ path: /q }}
                respond: {{ status: 200, body: "ok" }}
                limits: [byq]
              - name: c
                match: {{ path: /c }}
                respond: {{ status: 200, body: "ok" }}
                limits: [byc]
            "#
    )))
    .await;
    let c = Caller::new(gw.addr());
    // header
    let alice = [("x-user", "alice")];
    assert_eq!(c.statuses("/h", &alice, 3).await, [200, 200, 429]);
    assert_eq!(c.statuses("/h", &[("x-user", "bob")], 2).await, [200, 200]);
    // query
    assert_eq!(c.statuses("/q?user=alice", &[], 3).await, [200, 200, 429]);
    assert_eq!(c.statuses("/q?x=1&user=bob", &[], 2).await, [200, 200]);
    // cookie
    let ca = [("cookie", "theme=dark; sid=alice")];
    assert_eq!(c.statuses("/c", &ca, 3).await, [200, 200, 429]);
    assert_eq!(
        c.statuses("/c", &[("cookie", "sid=bob")], 2).await,
        [200, 200]
    );
    // Missing (on_missing_key defaults to client_ip): one bucket for the
    // address, apart from alice's and bob's.
    assert_eq!(c.statuses("/h", &[], 3).await, [200, 200, 429]);
    assert_eq!(c.statuses("/q?other=alice", &[], 3).await, [200, 200, 429]);
    assert_eq!(
        c.statuses("/c", &[("cookie", "other=alice")], 3).await,
        [200, 200, 429]
    );
    assert_eq!(
        Caller::from(gw.addr(), 2).statuses("/h", &[], 1).await,
        [200]
    );
    for limit in ["byh", "byq", "byc"] {
        assert_eq!(limit_state(&gw, limit, "alice").await["remaining"], 0);
        assert_eq!(limit_state(&gw, limit, "bob").await["remaining"], 0);
        assert_eq!(limit_state(&gw, limit, "carol").await["remaining"], 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_keys_combine_their_sources() {
    let gw = OneRoute::new()
        .limit(
            "comp",
            &format!(r#"{{ {TB2}, key: [client_ip, "header:x-user"] }}"#),
        )
        .start()
        .await;
    let (c2, c3) = (Caller::from(gw.addr(), 2), Caller::from(gw.addr(), 3));
    let alice = [("x-user", "alice")];
    assert_eq!(c2.statuses("/", &alice, 3).await, [200, 200, 429]);
    assert_eq!(c3.statuses("/", &alice, 1).await, [200]);
    assert_eq!(c2.statuses("/", &[("x-user", "bob")], 1).await, [200]);
    // The admin key joins the components with '|'.
    let v = limit_state(&gw, "comp", "127.0.0.2|alice").await;
    assert_eq!(v["remaining"], 0, "{v}");
    assert_eq!(
        limit_state(&gw, "comp", "127.0.0.3|alice").await["remaining"],
        1
    );
    assert_eq!(
        limit_state(&gw, "comp", "127.0.0.2|bob").await["remaining"],
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_and_global_keys_share_one_bucket() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          per_route: { algorithm: token_bucket, rate: 1/m, burst: 2, key: route }
          everyone: { algorithm: token_bucket, rate: 1/m, burst: 3, key: global }
        routes:
          - { name: r1, match: { path: /r1 }, respond: { status: 200 }, limits: [per_route] }
          - { name: r2, match: { path: /r2 }, respond: { status: 200 }, limits: [per_route] }
          - { name: g1, match: { path: /g1 }, respond: { status: 200 }, limits: [everyone] }
          - { name: g2, match: { path: /g2 }, respond: { status: 200 }, limits: [everyone] }
        "#,
    ))
    .await;
    let c: Vec<Caller> = (2..=5).map(|n| Caller::from(gw.addr(), n)).collect();
    // `route`: every client of a route shares its bucket; each route has one.
    assert_eq!(c[0].statuses("/r1", &[], 1).await, [200]);
    assert_eq!(c[1].statuses("/r1", &[], 1).await, [200]);
    assert_rejected(&c[2].get("/r1").await, "rate_limited", "per_route");
    assert_eq!(c[0].statuses("/r2", &[], 3).await, [200, 200, 429]);
    // `global`: one bucket over every route using the limit.
    assert_eq!(c[0].statuses("/g1", &[], 2).await, [200, 200]);
    assert_eq!(c[1].statuses("/g2", &[], 1).await, [200]);
    assert_rejected(&c[2].get("/g2").await, "rate_limited", "everyone");
    assert_rejected(&c[3].get("/g1").await, "rate_limited", "everyone");
    assert_eq!(limit_state(&gw, "per_route", "r1").await["remaining"], 0);
    assert_eq!(limit_state(&gw, "everyone", "global").await["remaining"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_missing_key_client_ip_skip_or_deny() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          m_ip: { algorithm: token_bucket, rate: 1/m, burst: 1, key: "header:x-user", on_missing_key: client_ip }
          m_skip: { algorithm: token_bucket, rate: 1/m, burst: 1, key: "header:x-user", on_missing_key: skip }
          m_deny: { algorithm: token_bucket, rate: 1/m, burst: 1, key: "header:x-user", on_missing_key: deny }
        routes:
          - { name: ip, match: { path: /ip }, respond: { status: 200 }, limits: [m_ip] }
          - { name: skip, match: { path: /skip }, respond: { status: 200 }, limits: [m_skip] }
          - { name: deny, match: { path: /deny }, respond: { status: 200 }, limits: [m_deny] }
        "#,
    ))
    .await;
    let (c2, c3) = (Caller::from(gw.addr(), 2), Caller::from(gw.addr(), 3));
    let alice = [("x-user", "alice")];
    // client_ip: the address stands in for the missing header.
    assert_eq!(c2.statuses("/ip", &[], 2).await, [200, 429]);
    assert_eq!(c3.statuses("/ip", &[], 1).await, [200]);
    assert_eq!(c2.statuses("/ip", &alice, 2).await, [200, 429]);
    // skip: the limit does not apply; nothing is counted.
    for _ in 0..5 {
        let r = c2.get("/skip").await;
        assert_ok(&r);
        assert!(
            rl_opt(&r, "m_skip").is_none(),
            "skipped limit in headers: {:?}",
            r.headers
        );
    }
    assert_eq!(
        decision_counts(&gw, "skip", 5).await,
        counts(&[("none", 5)])
    );
    assert_eq!(c2.statuses("/skip", &alice, 2).await, [200, 429]);
    // deny: rejected without a key.
    for _ in 0..2 {
        let r = c2.get("/deny").await;
        assert_eq!(r.status, 429, "{:?} {}", r.headers, r.text());
        assert_eq!(r.json()["limit"], "m_deny");
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    assert_eq!(c2.statuses("/deny", &alice, 2).await, [200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_clients_are_never_limited_nor_counted() {
    let gw = OneRoute::new()
        .limit(
            "ex",
            &format!(
                r#"{{ {TB2}, key: client_ip, exempt: ["127.0.0.5/32", "header:x-api-key=internal"] }}"#
            ),
        )
        .start()
        .await;
    let (c5, c6) = (Caller::from(gw.addr(), 5), Caller::from(gw.addr(), 6));
    assert_eq!(c5.statuses("/", &[], 6).await, [200; 6]);
    assert_eq!(limit_state(&gw, "ex", "127.0.0.5").await["remaining"], 2);
    let internal = [("x-api-key", "internal")];
    assert_eq!(c6.statuses("/", &internal, 6).await, [200; 6]);
    // Not counted: .6 still has its whole burst.
    assert_eq!(limit_state(&gw, "ex", "127.0.0.6").await["remaining"], 2);
    assert_eq!(
        c6.statuses("/", &[("x-api-key", "internal-not")], 3).await,
        [200, 200, 429]
    );
    assert_eq!(c6.statuses("/", &internal, 1).await, [200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_give_some_clients_other_parameters() {
    let gw = OneRoute::new()
        .limit(
            "ov",
            r#"
            algorithm: token_bucket
            rate: 1/m
            burst: 2
            key: client_ip
            overrides:
              - { match: "header:x-api-key=partner", burst: 5 }
              - { match: "127.0.0.6/32", burst: 1 }
            "#,
        )
        .start()
        .await;
    let check = |c: Caller, headers: Vec<(&'static str, &'static str)>, quota: i64| async move {
        for i in 0..quota {
            let r = c.get_h("/", &headers).await;
            assert_ok(&r);
            let f = rl(&r, "ov");
            assert_eq!((f.q, f.r), (quota, quota - 1 - i), "{headers:?}: {f:?}");
        }
        let r = c.get_h("/", &headers).await;
        assert_rejected(&r, "rate_limited", "ov");
        assert_eq!(rl(&r, "ov").q, quota);
    };
    check(Caller::from(gw.addr(), 2), vec![], 2).await;
    check(
        Caller::from(gw.addr(), 3),
        vec![("x-api-key", "partner")],
        5,
    )
    .await;
    check(Caller::from(gw.addr(), 6), vec![], 1).await;
}

// ---------------------------------------------------------------------------
// Lockouts
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockout_after_strikes_with_the_full_length_and_no_new_strikes() {
    let gw = OneRoute::new()
        .limit(
            "lk",
            r#"
            algorithm: token_bucket
            rate: 1/m
            burst: 1
            key: client_ip
            lockout: { after: 2, within: 10s, duration: 2s }
            "#,
        )
        .start()
        .await;
    let c = Caller::from(gw.addr(), 7);
    assert_ok(&c.get("/").await);
    // Strike 1: an ordinary rejection.
    assert_rejected(&c.get("/").await, "rate_limited", "lk");
    let v = limit_state(&gw, "lk", "127.0.0.7").await;
    assert_eq!(
        (v["strikes"].as_u64(), v["locked"].as_bool()),
        (Some(1), Some(false)),
        "{v}"
    );
    // Strike 2 locks, and already answers locked_out with the full length.
    let locked_at = Instant::now();
    let r = c.get("/").await;
    assert_eq!(assert_rejected(&r, "locked_out", "lk"), 2);
    let v = limit_state(&gw, "lk", "127.0.0.7").await;
    assert_eq!(v["locked"], true, "{v}");
    assert_eq!(v["lockouts"], 1, "{v}");
    assert!(
        (1..=2).contains(&v["locked_for"].as_u64().unwrap_or(99)),
        "{v}"
    );
    assert!(v["locked_until"].is_string(), "{v}");
    let l = lockouts(&gw).await;
    assert_eq!(l["count"], 1, "{l}");
    assert_eq!(l["lockouts"]["lk"][0]["key"], "127.0.0.7", "{l}");
    assert!(
        (1..=2).contains(&l["lockouts"]["lk"][0]["remaining"].as_u64().unwrap_or(99)),
        "{l}"
    );
    // During the lockout: locked_out, Retry-After the time left, no strike.
    for _ in 0..4 {
        let ra = assert_rejected(&c.get("/").await, "locked_out", "lk");
        assert!((1..=2).contains(&ra), "{ra}");
    }
    // Another client is not affected by it (its own bucket).
    assert_ok(&Caller::from(gw.addr(), 8).get("/").await);
    sleep_until(locked_at, MS(2150)).await;
    // Lock over; the bucket is still empty. Had the four rejections during
    // the lock been strikes, this would lock at once.
    assert_rejected(&c.get("/").await, "rate_limited", "lk");
    assert_eq!(
        assert_rejected(&c.get("/").await, "locked_out", "lk"),
        2,
        "second lockout (escalate 1) is as long"
    );
    assert_eq!(limit_state(&gw, "lk", "127.0.0.7").await["lockouts"], 2);
    assert_eq!(
        metric_with(&gw, "tollgate_lockouts_total", &[("limit", "lk")]).await,
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strikes_older_than_within_do_not_count() {
    let gw = OneRoute::new()
        .limit(
            "win",
            r#"
            algorithm: token_bucket
            rate: 1/m
            burst: 1
            key: client_ip
            lockout: { after: 2, within: 1s, duration: 2s }
            "#,
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    assert_ok(&c.get("/").await);
    let t1 = Instant::now();
    assert_rejected(&c.get("/").await, "rate_limited", "win");
    // The first strike's window is over: this one starts a new window.
    sleep_until(t1, MS(1200)).await;
    assert_rejected(&c.get("/").await, "rate_limited", "win");
    assert_eq!(limit_state(&gw, "win", "127.0.0.1").await["strikes"], 1);
    // Two within 1 s: locked.
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "win"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_escalate_up_to_max_duration() {
    let gw = OneRoute::new()
        .limit(
            "esc",
            r#"
            algorithm: token_bucket
            rate: 1/m
            burst: 1
            key: client_ip
            lockout: { after: 1, within: 10s, duration: 1s, escalate: 3, max_duration: 2s }
            "#,
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    assert_ok(&c.get("/").await);
    let t1 = Instant::now();
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "esc"), 1);
    sleep_until(t1, MS(1150)).await;
    // 1 s * 3 = 3 s, capped at 2 s.
    let t2 = Instant::now();
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "esc"), 2);
    sleep_until(t2, MS(2150)).await;
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "esc"), 2);
    assert_eq!(limit_state(&gw, "esc", "127.0.0.1").await["lockouts"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_are_forgotten_after_forget_after() {
    let gw = OneRoute::new()
.limit(
"fg",
r#"
            algorithm: token_bucket
            rate: 1/m
            burst: 1
            key: client_ip
            lockout: { after: 1, within: 10s, duration: 1s, escalate: 2, max_duration: 10s, forget_after: 1500ms }
            "#,
)
.start()
.await;
    let c = Caller::new(gw.addr());
    assert_ok(&c.get("/").await);
    let t1 = Instant::now();
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "fg"), 1);
    // Within forget_after of the end of the first: escalated.
    sleep_until(t1, MS(1150)).await;
    let t2 = Instant::now();
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "fg"), 2);
    // Second ends at t2 + 2 s; forgotten 1.5 s later.
    sleep_until(t2, MS(3800)).await;
    assert_eq!(
        assert_rejected(&c.get("/").await, "locked_out", "fg"),
        1,
        "after forget_after a lockout starts again at duration"
    );
}

// ---------------------------------------------------------------------------
// All-or-nothing
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rejected_by_one_limit_takes_nothing_from_the_others() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          wide: { algorithm: token_bucket, rate: 1/m, burst: 5, key: client_ip }
          narrow: { algorithm: token_bucket, rate: 1/m, burst: 2, key: client_ip }
        routes:
          - { name: both, match: { path: /both }, respond: { status: 200 }, limits: [wide, narrow] }
          - { name: wide, match: { path: /wide }, respond: { status: 200 }, limits: [wide] }
        "#,
    ))
    .await;
    let c = Caller::new(gw.addr());
    for (w, n) in [(4, 1), (3, 0)] {
        let r = c.get("/both").await;
        assert_ok(&r);
        assert_eq!(
            policy_names(&r),
            ["wide", "narrow"],
            "one item per limit, in order"
        );
        assert_eq!((remaining(&r, "wide"), remaining(&r, "narrow")), (w, n));
    }
    for i in 0..4 {
        let r = c.get("/both").await;
        assert_rejected(&r, "rate_limited", "narrow");
        assert!(
            rl_opt(&r, "wide").is_some(),
            "rejection #{i} lacks the fields of the route's other limit: {:?}",
            r.headers
        );
        assert_eq!(remaining(&r, "wide"), 3, "wide untouched by the rejection");
        assert_eq!(remaining(&r, "narrow"), 0);
    }
    assert_eq!(limit_state(&gw, "wide", "127.0.0.1").await["remaining"], 3);
    assert_eq!(
        limit_state(&gw, "narrow", "127.0.0.1").await["remaining"],
        0
    );
    for want in [2, 1, 0] {
        let r = c.get("/wide").await;
        assert_ok(&r);
        assert_eq!(remaining(&r, "wide"), want);
    }
    assert_rejected(&c.get("/wide").await, "rate_limited", "wide");
}

// ---------------------------------------------------------------------------
// Rate-limit fields and rejections
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_fields_are_structured_lists_with_q_w_r_t() {
    let gw = OneRoute::new()
        .limit(
            "fw",
            "{ algorithm: fixed_window, limit: 5, window: 10s, key: client_ip }",
        )
        .limit(
            "tb",
            "{ algorithm: token_bucket, rate: 3/m, burst: 3, key: client_ip }",
        )
        .start()
        .await;
    let c = Caller::new(gw.addr());
    ensure_room(Duration::from_secs(10), Duration::from_secs(4)).await;
    for i in 0..3 {
        let r = c.get("/").await;
        assert_ok(&r);
        assert_eq!(policy_names(&r), ["fw", "tb"]);
        let fw = rl(&r, "fw");
        assert_eq!(
            (fw.q, fw.w, fw.r, fw.qu.clone()),
            (5, 10, 4 - i, None),
            "{fw:?}"
        );
        assert!(fw.t >= 1, "{fw:?}");
        let tb = rl(&r, "tb");
        // One token per 20 s: the next is back in 20 s (draft 11's t).
        assert_eq!((tb.q, tb.w, tb.r, tb.t), (3, 60, 2 - i, 20), "{tb:?}");
        for legacy in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert!(
                r.header(legacy).is_none(),
                "standard style sends no {legacy}"
            );
        }
        assert!(r.header("retry-after").is_none());
    }
    let r = c.get("/").await;
    let ra = assert_rejected(&r, "rate_limited", "tb");
    assert!(ra == rl(&r, "tb").t as u64 && ra <= 20, "Retry-After {ra}");
    assert_eq!(rl(&r, "fw").r, 2, "fw untouched by tb's rejection");
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{:?}",
        r.headers
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_both_and_none_header_styles() {
    let route = |name: &str, style: &str| {
        format!(
            r#"
  - name: {name}
    match: {{ path: /{name} }}
    respond: {{ status: 200 }}
    limit_response: {{ headers: {style} }}
    limits:
      - {{ algorithm: token_bucket, rate: 5/m, burst: 5, key: client_ip }}
      - {{ algorithm: token_bucket, rate: 3/m, burst: 3, key: client_ip }}"#
        )
    };
    let body = format!(
        "routes:{}{}{}\n",
        route("legacy", "legacy"),
        route("both", "both"),
        route("none", "none")
    );
    let gw = Gateway::start(&config(&body)).await;
    let c = Caller::new(gw.addr());
    let legacy = |r: &Resp| {
        (
            r.header("x-ratelimit-limit").map(str::to_owned),
            r.header("x-ratelimit-remaining").map(str::to_owned),
            r.header("x-ratelimit-reset").map(str::to_owned),
        )
    };
    let some = |a: &str, b: &str, c: &str| (Some(a.into()), Some(b.into()), Some(c.into()));

    // legacy: the most restrictive limit (fewest remaining), only.
    let r = c.get("/legacy").await;
    assert_ok(&r);
    assert_eq!(legacy(&r), some("3", "2", "20"));
    assert!(r.header("ratelimit").is_none() && r.header("ratelimit-policy").is_none());

    // both: the two sets, inline limits named <route>.<index>.
    let r = c.get("/both").await;
    assert_ok(&r);
    assert_eq!(legacy(&r), some("3", "2", "20"));
    assert_eq!(policy_names(&r), ["both.0", "both.1"]);
    assert_eq!(rl(&r, "both.0").r, 4);
    assert_eq!(rl(&r, "both.1").r, 2);

    // none: no rate-limit field, but a rejection still says when to retry.
    for _ in 0..3 {
        let r = c.get("/none").await;
        assert_ok(&r);
        assert!(!has_rate_limit_fields(&r), "{:?}", r.headers);
    }
    let r = c.get("/none").await;
    assert_rejected(&r, "rate_limited", "none.1");
    assert!(!has_rate_limit_fields(&r), "{:?}", r.headers);

    // legacy on a rejection: Retry-After >= X-RateLimit-Reset.
    for _ in 0..2 {
        assert_ok(&c.get("/legacy").await);
    }
    let r = c.get("/legacy").await;
    let ra = assert_rejected(&r, "rate_limited", "legacy.1");
    assert_eq!(legacy(&r).1.as_deref(), Some("0"));
    let reset: u64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
    assert!(
        ra >= reset,
        "Retry-After {ra} earlier than X-RateLimit-Reset {reset}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_status_and_grpc_rejections() {
    let gw = Gateway::start(&config(
        r#"
        limits:
          one: { algorithm: token_bucket, rate: 1/m, burst: 1, key: client_ip }
        routes:
          - name: grpc
            match: { path: /grpc }
            respond: { status: 200 }
            limits: [one]
          - name: teapot
            match: { path: /teapot }
            respond: { status: 200 }
            limit_response: { status: 418 }
            limits: [{ algorithm: token_bucket, rate: 1/m, burst: 1, key: client_ip }]
        "#,
    ))
    .await;
    let c = Caller::new(gw.addr());
    assert_ok(&c.get("/teapot").await);
    assert_rejected_status(&c.get("/teapot").await, 418, "rate_limited", "teapot.0");

    let h2 = client::h2c();
    let grpc = |ct: &'static str| {
        client::req(Method::POST, gw.addr(), "/grpc")
            .header("content-type", ct)
            .header("te", "trailers")
            .body(client::full(vec![0u8, 0, 0, 0, 0]))
            .unwrap()
    };
    assert_ok(&client::send(&h2, grpc("application/grpc")).await);
    for ct in ["application/grpc", "application/grpc+proto"] {
        let r = client::send(&h2, grpc(ct)).await;
        assert_eq!(
            r.status, 200,
            "gRPC rejections are HTTP 200: {:?}",
            r.headers
        );
        let status = r.header("grpc-status").map(str::to_owned).or_else(|| {
            r.trailers
                .as_ref()
                .and_then(|t| t.get("grpc-status"))
                .and_then(|v| v.to_str().ok().map(str::to_owned))
        });
        assert_eq!(
            status.as_deref(),
            Some("8"),
            "RESOURCE_EXHAUSTED: {:?}",
            r.headers
        );
        let message = r.header("grpc-message").map(str::to_owned).or_else(|| {
            r.trailers
                .as_ref()
                .and_then(|t| t.get("grpc-message"))
                .and_then(|v| v.to_str().ok().map(str::to_owned))
        });
        assert!(
            message.is_some_and(|m| !m.is_empty()),
            "grpc-message: {:?}",
            r.headers
        );
        assert!(
            r.header("content-type")
                .is_some_and(|v| v.starts_with("application/grpc")),
            "{:?}",
            r.headers
        );
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let ra: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!(ra >= rl(&r, "one").t as u64);
    }
    assert_eq!(
        decision_counts(&gw, "grpc", 3).await,
        counts(&[("allowed", 1), ("rejected", 2)])
    );
}

// ---------------------------------------------------------------------------
// Admin API
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_limits_get_delete_and_lockouts() {
    let gw = OneRoute::new()
        .limit(
            "adm",
            r#"
            algorithm: token_bucket
            rate: 3/m
            burst: 3
            key: client_ip
            lockout: { after: 1, duration: 30s }
            "#,
        )
        .start()
        .await;
    let c = Caller::from(gw.addr(), 2);
    let v = limit_state(&gw, "adm", "127.0.0.2").await;
    assert_eq!(v["algorithm"], "token_bucket", "{v}");
    assert_eq!(v["quota"], 3, "{v}");
    assert_eq!(v["remaining"], 3, "{v}");
    assert_eq!(v["locked"], false, "{v}");
    assert!(v["locked_until"].is_null(), "{v}");
    assert_eq!(v["locked_for"], 0, "{v}");
    assert_eq!(v["strikes"], 0, "{v}");
    assert_eq!(v["lockouts"], 0, "{v}");
    assert_eq!(lockouts(&gw).await["count"], 0);

    assert_eq!(c.statuses("/", &[], 2).await, [200, 200]);
    let v = limit_state(&gw, "adm", "127.0.0.2").await;
    assert_eq!(v["remaining"], 1, "{v}");
    let reset = v["reset"].as_u64().unwrap_or(0);
    assert!((21..=40).contains(&reset), "two tokens back in ~40 s: {v}");

    // DELETE resets the counters.
    reset_limit(&gw, "adm", "127.0.0.2").await;
    assert_eq!(limit_state(&gw, "adm", "127.0.0.2").await["remaining"], 3);
    assert_eq!(c.statuses("/", &[], 3).await, [200, 200, 200]);
    assert_eq!(assert_rejected(&c.get("/").await, "locked_out", "adm"), 30);
    let v = limit_state(&gw, "adm", "127.0.0.2").await;
    assert_eq!(v["locked"], true, "{v}");
    assert!(
        (29..=30).contains(&v["locked_for"].as_u64().unwrap_or(0)),
        "{v}"
    );
    assert_eq!(v["lockouts"], 1, "{v}");
    assert_eq!(v["remaining"], 0, "{v}");
    let l = lockouts(&gw).await;
    assert_eq!(l["count"], 1, "{l}");
    let entry = &l["lockouts"]["adm"][0];
    assert_eq!(entry["key"], "127.0.0.2", "{l}");
    assert!(
        (29..=30).contains(&entry["remaining"].as_u64().unwrap_or(0)),
        "{l}"
    );
    assert_rejected(&c.get("/").await, "locked_out", "adm");

    // DELETE lifts the lockout too (and the deny cache lets go).
    reset_limit(&gw, "adm", "127.0.0.2").await;
    let v = limit_state(&gw, "adm", "127.0.0.2").await;
    assert_eq!(
        (v["locked"].as_bool(), v["remaining"].as_u64()),
        (Some(false), Some(3)),
        "{v}"
    );
    assert_ok(&c.get("/").await);
    assert_eq!(lockouts(&gw).await["count"], 0);

    // Unknown limits are 404.
    let r = admin(&gw, Method::GET, "/limits/nope/127.0.0.2").await;
    assert_eq!(r.status, 404, "{}", r.text());
    let r = admin(&gw, Method::DELETE, "/limits/nope/127.0.0.2").await;
    assert_eq!(r.status, 404, "{}", r.text());
}

// ---------------------------------------------------------------------------
// Limit state across reloads (docs/operations.md)
// ---------------------------------------------------------------------------

fn reload_config(second: bool) -> String {
    let (grow, algo, keyed, extra) = if second {
        (
            "{ algorithm: fixed_window, limit: 5, window: 1m, key: client_ip }",
            "{ algorithm: sliding_window, limit: 2, window: 1m, key: client_ip }",
            "{ algorithm: token_bucket, rate: 1/m, burst: 2, key: \"header:x-user\" }",
            "  - { name: extra, match: { path: /extra }, respond: { status: 200 } }\n",
        )
    } else {
        (
            "{ algorithm: fixed_window, limit: 3, window: 1m, key: client_ip }",
            "{ algorithm: fixed_window, limit: 2, window: 1m, key: client_ip }",
            "{ algorithm: token_bucket, rate: 1/m, burst: 2, key: client_ip }",
            "",
        )
    };
    config(&format!(
        r#"
limits:
  keep: {{ algorithm: token_bucket, rate: 1/m, burst: 2, key: client_ip, lockout: {{ after: 1, duration: 30s }} }}
  grow: {grow}
  algo: {algo}
  keyed: {keyed}
routes:
  - {{ name: keep, match: {{ path: /keep }}, respond: {{ status: 200 }}, limits: [keep] }}
  - {{ name: grow, match: {{ path: /grow }}, respond: {{ status: 200 }}, limits: [grow] }}
  - {{ name: algo, match: {{ path: /algo }}, respond: {{ status: 200 }}, limits: [algo] }}
  - {{ name: keyed, match: {{ path: /keyed }}, respond: {{ status: 200 }}, limits: [keyed] }}
{extra}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_state_survives_a_reload_unless_algorithm_or_key_changed() {
    // The fixed windows must not roll over during the test.
    ensure_room(Duration::from_secs(60), Duration::from_secs(12)).await;
    let gw = Gateway::start(&reload_config(false)).await;
    let (c2, c3) = (Caller::from(gw.addr(), 2), Caller::from(gw.addr(), 3));
    assert_eq!(c2.statuses("/keep", &[], 2).await, [200, 200]);
    assert_rejected(&c2.get("/keep").await, "locked_out", "keep");
    assert_eq!(c3.statuses("/keep", &[], 1).await, [200]);
    assert_eq!(c2.statuses("/grow", &[], 4).await, [200, 200, 200, 429]);
    assert_eq!(c2.statuses("/algo", &[], 3).await, [200, 200, 429]);
    assert_eq!(c2.statuses("/keyed", &[], 3).await, [200, 200, 429]);

    let generation = gw.generation().await;
    gw.rewrite_config(&reload_config(true));
    gw.sighup();
    eventually(Duration::from_secs(5), "the reload", || async {
        (gw.generation().await > generation).then_some(())
    })
    .await;
    assert!(gw.config_state().await["last_error"].is_null());
    assert_ok(&c2.get("/extra").await);

    // Unchanged: counters and lockouts kept.
    assert_rejected(&c2.get("/keep").await, "locked_out", "keep");
    let r = c3.get("/keep").await;
    assert_ok(&r);
    assert_eq!(remaining(&r, "keep"), 0);
    assert_rejected(&c3.get("/keep").await, "locked_out", "keep");
    // Limit 3 -> 5 with 3 taken: exactly 2 more.
    for want in [1, 0] {
        let r = c2.get("/grow").await;
        assert_ok(&r);
        assert_eq!(rl(&r, "grow").q, 5);
        assert_eq!(remaining(&r, "grow"), want);
    }
    assert_rejected(&c2.get("/grow").await, "rate_limited", "grow");
    // Another algorithm, another key: fresh state.
    assert_eq!(c2.statuses("/algo", &[], 3).await, [200, 200, 429]);
    assert_eq!(c2.statuses("/keyed", &[], 3).await, [200, 200, 429]);
}
