//! What the failover tests of the shared stores (Redis Cluster, Sentinel)
//! have in common: two gateways on one store, load from several clients
//! with every request timed, a probe that says whether the gateways share
//! state again (decisions back on Redis), and a count after recovery.
//!
//! The gateways run [`LIMITS`]: `/` counts per `x-k` header under a limit
//! that is never reached, `/p` allows one request per `x-probe` value.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::limits::{assert_ok, has_rate_limit_fields, remaining, Caller};

/// The store timeout of the failover tests, and the margin on top of it
/// for a 2-core machine (the issue allows `timeout` + 25 ms; the margin
/// covers a debug build, several Redis and two gateways on two cores).
pub const STORE_TIMEOUT: Duration = Duration::from_millis(100);
/// See [`STORE_TIMEOUT`].
pub const LATENCY_MARGIN: Duration = Duration::from_millis(150);

/// The limits and routes of a failover test's gateways.
pub const LIMITS: &str = r#"
limits:
  l: { algorithm: fixed_window, limit: 1000000, window: 1h, key: header:x-k }
  p: { algorithm: fixed_window, limit: 1, window: 1h, key: header:x-probe }
routes:
  - { name: p, match: { path: /p }, respond: { status: 200 }, limits: [p] }
  - { name: r, match: { path: / }, respond: { status: 200 }, limits: [l] }
"#;

/// Requests sent back to back by several tasks, each with its own `x-k`,
/// alternating between two gateways; each must answer 200 (on Redis, or
/// by the `local` policy meanwhile). Records the slowest.
pub struct Load {
    stop: Arc<AtomicBool>,
    worst: Arc<Mutex<Duration>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Starts `clients` tasks, even ones on `a`, odd ones on `b`.
    pub fn start(a: &Caller, b: &Caller, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let worst = Arc::new(Mutex::new(Duration::ZERO));
        let tasks = (0..clients)
            .map(|i| {
                let c = if i % 2 == 0 { a.clone() } else { b.clone() };
                let (stop, worst) = (stop.clone(), worst.clone());
                tokio::spawn(async move {
                    let k = format!("load-{i}");
                    while !stop.load(Ordering::SeqCst) {
                        let t0 = Instant::now();
                        let r = c.try_get_h("/", &[("x-k", &k)]).await;
                        let took = t0.elapsed();
                        {
                            let mut w = worst.lock().unwrap_or_else(|e| e.into_inner());
                            *w = (*w).max(took);
                        }
                        let r = r.unwrap_or_else(|e| panic!("no answer after {took:?}: {e}"));
                        assert_eq!(r.status, 200, "{}", r.text());
                    }
                })
            })
            .collect();
        Load { stop, worst, tasks }
    }

    /// Stops the load (a task's failure fails the test): the slowest
    /// request's time.
    pub async fn stop(self) -> Duration {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("load task");
        }
        let worst = *self.worst.lock().unwrap_or_else(|e| e.into_inner());
        worst
    }
}

/// Fresh probe values, one per [`shared_again`] call.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// Whether two gateways share state again: a fresh key used up on `b`
/// (decided on Redis: it carries rate-limit fields) is seen used up on `a`.
pub async fn shared_again(a: &Caller, b: &Caller) -> bool {
    let v = format!("probe-{}", PROBE.fetch_add(1, Ordering::SeqCst));
    let h = [("x-probe", v.as_str())];
    let first = b.try_get_h("/p", &h).await;
    let second = a.try_get_h("/p", &h).await;
    matches!((first, second), (Ok(f), Ok(s)) if f.status == 200 && has_rate_limit_fields(&f) && s.status == 429)
}

/// Waits until the gateways share state again; fails the test if that
/// takes past `deadline` (from `t0`). Returns when, from `t0`.
pub async fn back_on_redis(a: &Caller, b: &Caller, t0: Instant, deadline: Duration) -> Duration {
    loop {
        if shared_again(a, b).await {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < deadline,
            "decisions not back on Redis within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// After a failover that promoted a replica at `promoted` (from `t0`):
/// decisions are back on Redis within 5 s of it, the load saw no request
/// wait longer than the store timeout (plus the machine's margin), and the
/// count after recovery is exact. Prints the figures.
pub async fn recovered(
    what: &str,
    a: &Caller,
    b: &Caller,
    load: Load,
    t0: Instant,
    promoted: Duration,
) {
    let back = back_on_redis(a, b, t0, promoted + Duration::from_secs(5)).await;
    let worst = load.stop().await;
    eprintln!("{what}: promoted after {promoted:?}, shared again after {back:?}, slowest request {worst:?}");
    assert!(
        worst <= STORE_TIMEOUT + LATENCY_MARGIN,
        "a request waited {worst:?} (timeout {STORE_TIMEOUT:?})"
    );
    counted_once(a, b).await;
}

/// After recovery, 20 requests over both gateways take exactly 20 units:
/// none counted twice, none lost.
pub async fn counted_once(a: &Caller, b: &Caller) {
    let k = [("x-k", "after")];
    let first = remaining(&a.get_h("/", &k).await, "l");
    for _ in 0..19 {
        assert_ok(&b.get_h("/", &k).await);
    }
    let last = remaining(&a.get_h("/", &k).await, "l");
    assert_eq!(first - last, 20, "each request counted once");
}
