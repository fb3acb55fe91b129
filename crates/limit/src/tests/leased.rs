//! Leased limits through [`Limiter`]s on a real `redis-server`: three
//! limiters (three instances) sharing one Redis never admit more than the
//! limit, admit at least the limit less one lease each, and leave nothing
//! leased in the store once they give back; a request another limit
//! rejects spends nothing of its lease; an outage spends what is leased,
//! then applies `on_error`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tollgate_testkit::RedisServer;

use crate::algorithm::{fixed_window, gcra, sliding_window, token_bucket, Rate, SECOND};
use crate::key::KeyHasher;
use crate::store::{OnError, StoreBackend};
use crate::{AlgoParams, Check, Decision, Leasing, Limiter, StoreConfig};

const HOUR: u64 = 3_600 * SECOND;

/// A limit of 100 of each leasable algorithm (buckets refill 100 an hour:
/// nothing comes back while a test runs).
fn hundred_of_each() -> Vec<AlgoParams> {
    let rate = Rate::new(100, HOUR).unwrap();
    vec![
        AlgoParams::FixedWindow(
            fixed_window::Params::new(100, fixed_window::Window::Fixed(HOUR)).unwrap(),
        ),
        AlgoParams::SlidingWindow(sliding_window::Params::new(100, HOUR).unwrap()),
        AlgoParams::TokenBucket(token_bucket::Params::new(rate, 100, 0).unwrap()),
        AlgoParams::Gcra(gcra::Params::new(rate, 100, 0).unwrap()),
    ]
}

fn limiter(url: &str, on_error: OnError) -> Arc<Limiter> {
    let config = StoreConfig {
        timeout: Duration::from_millis(200),
        on_error,
        ..StoreConfig::with_backend(StoreBackend::Redis {
            url: url.to_owned(),
        })
    };
    Limiter::new(&config).unwrap()
}

fn leased(name: &str, params: &AlgoParams, size: u64) -> Check {
    let key = KeyHasher::new(name.as_bytes()).finish();
    Check::new(name.into(), key, params.clone()).leased(Leasing::new(size, 10 * SECOND))
}

fn allowed(d: &Decision) -> bool {
    matches!(d, Decision::Allow { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_admit_at_most_the_limit_and_return_what_they_did_not_spend() {
    let server = RedisServer::start();
    for (n, params) in hundred_of_each().iter().enumerate() {
        for trial in 0..5 {
            let name = format!("leased-{n}-{trial}");
            let instances: Vec<_> = (0..3)
                .map(|_| limiter(&server.url(), OnError::Deny))
                .collect();
            let requests = instances.iter().flat_map(|l| {
                let name = &name;
                (0..100).map(move |_| async move {
                    allowed(&l.decide(vec![leased(name, params, 10)]).await)
                })
            });
            let admitted = join_all(requests).await.into_iter().filter(|a| *a).count();
            assert!(
                (70..=100).contains(&admitted),
                "{} trial {trial}: {admitted} admitted",
                params.name()
            );
            let returned: u64 = join_all(instances.iter().map(|l| l.return_leases()))
                .await
                .into_iter()
                .sum();
            assert!(instances.iter().all(|l| l.leases_held() == 0));
            // Nothing leased stays in the store: an exact instance admits
            // exactly what the three did not.
            let exact = limiter(&server.url(), OnError::Deny);
            let mut more = 0;
            for _ in 0..110 {
                let c = Check {
                    leasing: None,
                    ..leased(&name, params, 10)
                };
                more += usize::from(allowed(&exact.decide(vec![c]).await));
            }
            assert_eq!(
                admitted + more,
                100,
                "{} trial {trial}: {admitted} admitted, {returned} leases returned, {more} more",
                params.name()
            );
        }
    }
}

#[tokio::test]
async fn a_request_another_limit_rejects_spends_nothing_of_its_lease() {
    let server = RedisServer::start();
    let l = limiter(&server.url(), OnError::Deny);
    let params = &hundred_of_each()[0];
    let one = AlgoParams::FixedWindow(
        fixed_window::Params::new(1, fixed_window::Window::Fixed(HOUR)).unwrap(),
    );
    let strict = |client: &str| {
        Check::new(
            "strict".into(),
            KeyHasher::new(b"strict").value(client.as_bytes()).finish(),
            one.clone(),
        )
    };
    // Takes a lease of 10 (1 spent) and the strict limit's only unit.
    assert!(allowed(
        &l.decide(vec![leased("shared", params, 10), strict("a")])
            .await
    ));
    // Rejected by the strict limit: the leased unit goes back to the lease.
    for _ in 0..5 {
        let d = l
            .decide(vec![leased("shared", params, 10), strict("a")])
            .await;
        let Decision::Reject { limit, figures, .. } = d else {
            panic!("rejected")
        };
        assert_eq!(&*limit, "strict");
        assert_eq!(figures[0].outcome.status, crate::Status::NotConsumed);
    }
    // The lease still holds 9: nine more pass without the store.
    for i in 0..9 {
        assert!(
            allowed(&l.decide(vec![leased("shared", params, 10)]).await),
            "{i}"
        );
    }
    l.return_leases().await;
    let Decision::Allow { figures, .. } = l
        .decide(vec![Check {
            leasing: None,
            ..leased("shared", params, 10)
        }])
        .await
    else {
        panic!("allowed")
    };
    assert_eq!(
        figures[0].outcome.remaining, 89,
        "10 used, this one the 11th"
    );
}

#[tokio::test]
async fn an_outage_spends_the_lease_then_applies_on_error() {
    let server = RedisServer::start();
    let l = limiter(&server.url(), OnError::Deny);
    let params = &hundred_of_each()[0];
    assert!(allowed(&l.decide(vec![leased("o", params, 10)]).await));
    server.kill();
    for i in 0..9 {
        assert!(
            allowed(&l.decide(vec![leased("o", params, 10)]).await),
            "unit {i} of the lease"
        );
    }
    assert!(matches!(
        l.decide(vec![leased("o", params, 10)]).await,
        Decision::Unavailable
    ));
}

/// How many of 110 exact requests of `name` pass on a fresh instance.
async fn exact_admits(url: &str, name: &str, params: &AlgoParams) -> usize {
    let exact = limiter(url, OnError::Deny);
    let mut more = 0;
    for _ in 0..110 {
        let c = Check {
            leasing: None,
            ..leased(name, params, 10)
        };
        more += usize::from(allowed(&exact.decide(vec![c]).await));
    }
    more
}

#[tokio::test]
async fn unspent_units_go_back_at_the_end_and_when_the_ttl_runs_out() {
    let server = RedisServer::start();
    for (n, params) in hundred_of_each().iter().enumerate() {
        // Three instances spend 4 of a lease of 10 each (not half: no
        // top-up), then give back.
        let name = format!("back-{n}");
        let instances: Vec<_> = (0..3)
            .map(|_| limiter(&server.url(), OnError::Deny))
            .collect();
        for l in &instances {
            for _ in 0..4 {
                assert!(allowed(&l.decide(vec![leased(&name, params, 10)]).await));
            }
        }
        assert_eq!(
            exact_admits(&server.url(), &name, params).await,
            70,
            "12 spent, 18 leased"
        );
        let returned: u64 = join_all(instances.iter().map(|l| l.return_leases()))
            .await
            .into_iter()
            .sum();
        assert_eq!(returned, 3, "{}", params.name());
        // 70 more were taken by the exact instance above.
        let name2 = format!("ttl-{n}");
        // A lease of a 300 ms ttl goes back by itself (the sweep).
        let l = &instances[0];
        let short = || {
            let key = KeyHasher::new(name2.as_bytes()).finish();
            Check::new(name2.as_str().into(), key, params.clone()).leased(Leasing::new(10, 300_000))
        };
        assert!(allowed(&l.decide(vec![short()]).await));
        assert_eq!(l.leases_held(), 1);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(l.leases_held(), 0, "{}: swept", params.name());
        assert_eq!(
            exact_admits(&server.url(), &name2, params).await,
            99,
            "{}",
            params.name()
        );
    }
}
