//! One limit decision on the memory store, per algorithm (issue target:
//! under 1 µs single-threaded). Run: `cargo bench --bench decision`.

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_limit::algorithm::{
    concurrency, fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket, Rate,
    SECOND,
};
use tollgate_limit::store::memory::MemoryStore;
use tollgate_limit::{AlgoParams, Check};

fn algorithms() -> Vec<(&'static str, AlgoParams)> {
    let rate = Rate::new(1000, SECOND).unwrap();
    vec![
        (
            "fixed_window",
            AlgoParams::FixedWindow(
                fixed_window::Params::new(1000, fixed_window::Window::Fixed(60 * SECOND)).unwrap(),
            ),
        ),
        (
            "sliding_window",
            AlgoParams::SlidingWindow(sliding_window::Params::new(1000, 60 * SECOND).unwrap()),
        ),
        (
            "sliding_log",
            AlgoParams::SlidingLog(sliding_log::Params::new(100, 60 * SECOND).unwrap()),
        ),
        (
            "token_bucket",
            AlgoParams::TokenBucket(token_bucket::Params::new(rate, 100, 0).unwrap()),
        ),
        (
            "gcra",
            AlgoParams::Gcra(gcra::Params::new(rate, 100, 0).unwrap()),
        ),
        (
            "leaky_bucket",
            AlgoParams::LeakyBucket(leaky_bucket::Params::new(rate, 100, 0).unwrap()),
        ),
        (
            "concurrency",
            AlgoParams::Concurrency(concurrency::Params::new(100, 60 * SECOND).unwrap()),
        ),
    ]
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_decision");
    for (name, params) in algorithms() {
        let store = MemoryStore::new();
        // 10,000 clients, visited in turn; the clock moves 1 µs per request.
        let keys: Vec<[u8; 16]> = (0..10_000u32)
            .map(|i| {
                let mut k = [0u8; 16];
                k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
                k
            })
            .collect();
        let mut i = 0usize;
        let mut now = 1_700_000_000 * SECOND;
        let limit: std::sync::Arc<str> = name.into();
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                now += 1;
                let check = Check {
                    name: limit.clone(),
                    key: keys[i],
                    params: params.clone(),
                    cost: 1,
                    lockout: None,
                    shadow: false,
                    lease: if name == "concurrency" { now } else { 0 },
                    quota: false,
                    leasing: None,
                };
                let outcome = store.decide(std::slice::from_ref(&check), now);
                if name == "concurrency" {
                    store.release(&check, now);
                }
                outcome
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
