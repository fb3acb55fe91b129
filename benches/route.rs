//! Route matching over 100 routes and path normalisation.
//! Run: `cargo bench --bench route`.
//!
//! The table mixes what real configs hold: prefix routes on a few hosts,
//! exact routes, method lists, a header matcher and a few regexes. The
//! router is a linear scan in file order, so the figures to watch are the
//! first route, the last one and a miss (every matcher tried).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use tollgate::config::{HeaderMatch, PathMatch};
use tollgate::route::matcher::{HostMatcher, RequestMatcher};
use tollgate::route::normalise::{normalise_path, EscapedSlashes};
use tollgate::route::Router;

fn hosts(h: &[&str]) -> HostMatcher {
    HostMatcher::new(&h.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// 100 routes: route `i` matches only its own paths (`/svc{i}/...`).
fn table() -> Router<usize> {
    let mut routes = Vec::with_capacity(100);
    for i in 0..100 {
        let m = match i % 5 {
            // A prefix on one host.
            0 => RequestMatcher {
                hosts: hosts(&["api.example.com"]),
                path: PathMatch::Prefix(format!("/svc{i}")),
                methods: vec![],
                headers: vec![],
            },
            // A prefix on a wildcard host, GET and HEAD only.
            1 => RequestMatcher {
                hosts: hosts(&["*.example.com"]),
                path: PathMatch::Prefix(format!("/svc{i}")),
                methods: vec![Method::GET, Method::HEAD],
                headers: vec![],
            },
            // An exact path on any host.
            2 => RequestMatcher {
                hosts: hosts(&[]),
                path: PathMatch::Exact(format!("/svc{i}/items")),
                methods: vec![],
                headers: vec![],
            },
            // A prefix with a header matcher.
            3 => RequestMatcher {
                hosts: hosts(&[]),
                path: PathMatch::Prefix(format!("/svc{i}")),
                methods: vec![],
                headers: vec![(
                    HeaderName::from_static("x-version"),
                    HeaderMatch::Exact("2".into()),
                )],
            },
            // A regex.
            _ => RequestMatcher {
                hosts: hosts(&[]),
                path: PathMatch::regex(&format!("^/svc{i}/v[0-9]+/items$")).unwrap(),
                methods: vec![],
                headers: vec![],
            },
        };
        routes.push((m, i));
    }
    Router::new(routes)
}

fn matching(c: &mut Criterion) {
    let router = table();
    let mut headers = HeaderMap::new();
    headers.insert("x-version", HeaderValue::from_static("2"));
    headers.insert("user-agent", HeaderValue::from_static("bench/1"));
    headers.insert("accept", HeaderValue::from_static("*/*"));
    let host = Some("api.example.com");
    let cases: [(&str, &str, usize); 5] = [
        ("first", "/svc0/users/7", 0),
        ("middle_exact", "/svc52/items", 52),
        ("middle_regex", "/svc49/v2/items", 49),
        ("last", "/svc99/v1/items", 99),
        ("miss", "/nothing/here", usize::MAX),
    ];
    let mut group = c.benchmark_group("route_100");
    for (name, path, want) in cases {
        assert_eq!(
            router
                .find(host, &Method::GET, path, &headers)
                .copied()
                .unwrap_or(usize::MAX),
            want,
            "{name}"
        );
        group.bench_function(name, |b| {
            b.iter(|| router.find(black_box(host), &Method::GET, black_box(path), &headers))
        });
    }
    group.finish();
}

fn normalising(c: &mut Criterion) {
    use EscapedSlashes::{Decode, Keep, Reject};
    let cases = [
        // Already canonical: the borrowed fast path, what nearly every request takes.
        ("canonical", "/api/v1/users/12345/orders", Reject),
        (
            "dot_segments",
            "/api/v1/./users/../users//12345/orders",
            Reject,
        ),
        (
            "percent_unreserved",
            "/api/%76%31/users/%7Ebob/orders",
            Reject,
        ),
        ("encoded_slash_kept", "/files/a%2Fb/c%5Cd", Keep),
        ("encoded_slash_decoded", "/files/a%2Fb/c%5Cd", Decode),
        (
            "long_canonical",
            "/a/very/long/path/with/many/segments/0123456789/abcdefghij/klmnopqrst/uvwxyz/end",
            Reject,
        ),
    ];
    let mut group = c.benchmark_group("normalise_path");
    for (name, path, mode) in cases {
        assert!(normalise_path(path, mode).is_ok(), "{name}");
        group.bench_function(name, |b| b.iter(|| normalise_path(black_box(path), mode)));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
    targets = matching, normalising
}
criterion_main!(benches);
