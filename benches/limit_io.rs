//! The per-request work around a limit decision: the client key (hashing)
//! and the rate-limit response headers. Run: `cargo bench --bench limit_io`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate::config::{HeaderStyle, KeySource, OnMissingKey};
use tollgate::limit::headers::add_headers;
use tollgate::limit::key::{client_key, RequestView};
use tollgate_limit::algorithm::SECOND;
use tollgate_limit::key::store_key;
use tollgate_limit::{Figure, Outcome, Status};

fn keys(c: &mut Criterion) {
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_static("partner-7-3f9c2a1b"));
    headers.insert(
        "cookie",
        HeaderValue::from_static("theme=dark; session=abcdef0123456789; lang=en"),
    );
    let v4 = RequestView {
        client: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
        headers: &headers,
        query: Some("page=2&user=alice&sort=asc"),
        route: "users",
        ipv6_prefix: 64,
        identity: None,
    };
    let v6 = RequestView {
        client: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6)),
        ..v4
    };
    let cases: Vec<(&str, Vec<KeySource>, RequestView<'_>)> = vec![
        ("client_ip_v4", vec![KeySource::ClientIp], v4),
        ("client_ip_v6_grouped", vec![KeySource::ClientIp], v6),
        (
            "ip_header",
            vec![
                KeySource::ClientIp,
                KeySource::Header(HeaderName::from_static("x-api-key")),
            ],
            v4,
        ),
        (
            "ip_query_cookie",
            vec![
                KeySource::ClientIp,
                KeySource::Query("user".into()),
                KeySource::Cookie("session".into()),
            ],
            v4,
        ),
        ("route", vec![KeySource::Route], v4),
    ];
    let mut group = c.benchmark_group("client_key");
    for (name, sources, view) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                client_key(
                    black_box(b"per_client/token_bucket"),
                    sources,
                    OnMissingKey::ClientIp,
                    view,
                )
            })
        });
    }
    group.finish();
    c.bench_function("store_key/two_components", |b| {
        b.iter(|| {
            store_key(
                black_box(b"login/fixed_window"),
                &[b"i\xcb\x00\x71\x07".as_slice(), b"halice"],
            )
        })
    });
}

fn outcome(limit: u64, remaining: u64, window_s: u64, reset_s: u64) -> Outcome {
    Outcome {
        status: Status::Allowed,
        lock_started: false,
        delay: 0,
        limit,
        window: window_s * SECOND,
        remaining,
        reset: reset_s * SECOND,
        grows_after: reset_s * SECOND,
        retry_after: 0,
        at: 0,
        taken: 0,
    }
}

fn figure(name: &str, outcome: Outcome) -> Figure {
    Figure {
        name: name.into(),
        outcome,
        concurrency: false,
        key: [0; 16],
        local: false,
    }
}

fn headers(c: &mut Criterion) {
    let outcomes = [
        outcome(20, 17, 2, 1),
        outcome(5, 4, 60, 42),
        outcome(1000, 999, 3600, 3599),
    ];
    let one = [figure("per_client", outcomes[0])];
    let three = [
        figure("per_client", outcomes[0]),
        figure("login", outcomes[1]),
        figure("hourly", outcomes[2]),
    ];
    let mut group = c.benchmark_group("add_headers");
    let cases: [(&str, HeaderStyle, &[Figure]); 4] = [
        ("standard_1", HeaderStyle::Standard, &one),
        ("standard_3", HeaderStyle::Standard, &three),
        ("legacy_3", HeaderStyle::Legacy, &three),
        ("both_3", HeaderStyle::Both, &three),
    ];
    for (name, style, limits) in cases {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || {
                    // A typical upstream response's header map.
                    let mut h = HeaderMap::with_capacity(16);
                    h.insert("content-type", HeaderValue::from_static("application/json"));
                    h.insert("content-length", HeaderValue::from_static("123"));
                    h.insert(
                        "date",
                        HeaderValue::from_static("Sat, 22 Nov 2025 17:42:00 GMT"),
                    );
                    h
                },
                |h| add_headers(h, style, black_box(limits), &[]),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
    targets = keys, headers
}
criterion_main!(benches);
