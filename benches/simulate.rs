//! `tollgate simulate`'s replay speed on a generated in-memory log of 100k
//! request lines (target: a million lines in under 10 s). Run:
//! `cargo bench --bench simulate`.
//!
//! `parse` is the line parser alone; `replay` is the whole replay (parse,
//! route, keys, one store decision per request, counting).

use std::io::Write as _;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::simulate::{parse_line, Simulator};

const LINES: u64 = 100_000;

const CONFIG: &str = r#"
server:
  listen: ["127.0.0.1:0"]
limits:
  per_client:
    algorithm: token_bucket
    rate: 10/s
    burst: 20
    key: client_ip
  login:
    algorithm: fixed_window
    limit: 5
    window: 1m
    key: [client_ip, "header:x-user"]
    lockout: { after: 1, duration: 15m, escalate: 2, max_duration: 24h }
    exempt: ["10.0.0.0/8"]
routes:
  - name: users
    match: { path: /users }
    respond: { status: 200 }
    limits: [per_client]
  - name: login
    match: { exact: /login, methods: [POST] }
    respond: { status: 200 }
    limits: [per_client, login]
  - name: items
    match: { regex: "^/v[0-9]+/items$" }
    respond: { status: 200 }
    limits:
      - { algorithm: sliding_window, limit: 100, window: 1m, key: client_ip }
  - name: static
    match: { path: /static }
    respond: { status: 200 }
"#;

/// One day of traffic from 20,000 clients, 20 of them busy, a fifth of it
/// to no route; login requests carry headers.
fn log() -> Vec<u8> {
    let mut out = Vec::with_capacity(LINES as usize * 120);
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        seed >> 33
    };
    for i in 0..LINES {
        let ts = 1_714_521_600.0 + i as f64 * 0.864;
        let c = if next() % 10 == 0 {
            next() % 20
        } else {
            next() % 20_000
        };
        let client = format!("203.0.{}.{}", c / 256, c % 256);
        let (method, path, headers) = match next() % 5 {
            0 => ("GET", format!("/users/{}", next() % 1000), String::new()),
            1 => (
                "POST",
                "/login".to_owned(),
                format!(
                    r#","headers":{{"x-user":"u{}","user-agent":"curl/8"}}"#,
                    c % 50
                ),
            ),
            2 => ("GET", "/v1/items".to_owned(), String::new()),
            3 => ("GET", "/static/app.js".to_owned(), String::new()),
            _ => ("GET", "/nope".to_owned(), String::new()),
        };
        let _ = writeln!(
            out,
            r#"{{"ts":{ts:.3},"client":"{client}","method":"{method}","path":"{path}","host":"api.example.com"{headers}}}"#
        );
    }
    out
}

fn bench(c: &mut Criterion) {
    let config = tollgate::config::parse(CONFIG, "bench.yaml")
        .expect("the bench config is valid")
        .config;
    let log = log();
    let mut group = c.benchmark_group("simulate");
    group.throughput(Throughput::Elements(LINES));
    group.sample_size(10);
    group.bench_function("parse", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                n += usize::from(parse_line(line).is_ok());
            }
            assert_eq!(n as u64, LINES);
        })
    });
    group.bench_function("replay", |b| {
        b.iter(|| {
            let mut sim = Simulator::new(config.clone()).expect("the simulator builds");
            sim.replay(&log[..], |line, e| panic!("line {line}: {e}"), |_| {})
                .expect("reading memory cannot fail");
            assert_eq!(sim.report("bench").requests, LINES);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
