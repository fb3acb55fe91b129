//! `tollgate simulate` (docs/simulation.md), through the real binary: logs whose
//! outcome each test computes independently (per-minute counts under a
//! fixed window, an escalating lockout replayed by a model of docs/configuration/limits.md),
//! the gateway's access-log format, the `--json` document checked whole,
//! malformed lines, and the failures that exit 1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};

/// 2024-05-01T12:00:00Z, a multiple of 60 s (fixed windows align to it).
const T0: u64 = 1_714_564_800;

/// A scratch directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("simulate-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap()
}

/// Run `simulate -c config log [--json]`.
fn simulate(config: &Path, log: &Path, json: bool) -> Output {
    let mut args = vec![
        "simulate",
        "-c",
        config.to_str().unwrap(),
        log.to_str().unwrap(),
    ];
    if json {
        args.push("--json");
    }
    tollgate(&args)
}

/// Run with `--json`, expect success, parse the document.
fn report(config: &Path, log: &Path) -> (Value, String) {
    let out = simulate(config, log, true);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    });
    (doc, stderr)
}

fn rfc3339(secs: f64) -> String {
    let at = UNIX_EPOCH + Duration::from_micros((secs * 1e6).round() as u64);
    humantime::format_rfc3339_micros(at).to_string()
}

fn line(ts: Value, client: &str, method: &str, path: &str) -> Value {
    json!({"ts": ts, "client": client, "method": method, "path": path})
}

fn log_text(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The expected `busiest` list: (client, requests, rejected, locked_out),
/// most requests first, ties by name, at most 5.
fn busiest(mut clients: Vec<(String, u64, u64, u64)>) -> Value {
    clients.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    clients.truncate(5);
    Value::Array(
        clients
            .into_iter()
            .map(|(c, n, r, l)| json!({"client": c, "requests": n, "rejected": r, "locked_out": l}))
            .collect(),
    )
}

const PER_MINUTE: &str = r#"
server:
  listen: ["127.0.0.1:0"]
limits:
  per_minute:
    algorithm: fixed_window
    limit: 10
    window: 1m
    key: client_ip
routes:
  - name: api
    match: { path: /api }
    respond: { status: 200 }
    limits: [per_minute]
  - name: open
    match: { path: /open }
    respond: { status: 200 }
"#;

#[test]
fn fixed_window_counts_per_minute_exactly() {
    let d = dir("fixed-window");
    let config = write(&d, "gateway.yaml", PER_MINUTE);
    // Requests per minute, per client, over four minutes.
    let plan: [(&str, [u64; 4]); 5] = [
        ("198.51.100.1", [5, 10, 15, 30]),
        ("198.51.100.2", [11, 0, 9, 10]),
        ("198.51.100.3", [1, 1, 1, 1]),
        ("198.51.100.4", [40, 0, 0, 12]),
        ("2001:db8::7", [0, 25, 0, 3]),
    ];
    let mut events = Vec::new();
    for (c, (client, counts)) in plan.iter().enumerate() {
        for (minute, &count) in counts.iter().enumerate() {
            for i in 0..count {
                // Spread inside the minute, never on its last second.
                let at = (T0 + 60 * minute as u64) as f64 + i as f64 * 59.0 / count as f64;
                events.push((at, c, *client));
            }
        }
    }
    events.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // Every `ts` spelling: integer seconds, float seconds, RFC 3339.
    let lines: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, &(at, _, client))| {
            let ts = match i % 3 {
                0 if at.fract() == 0.0 => json!(at as u64),
                1 => json!(at),
                _ => json!(rfc3339(at)),
            };
            line(ts, client, "GET", "/api/items")
        })
        .chain((0..7).map(|i| line(json!(T0 + 300 + i), "198.51.100.9", "GET", "/open/x")))
        .collect();
    let log = write(&d, "requests.log", &log_text(&lines));

    let mut per_client = Vec::new();
    let (mut allowed, mut rejected) = (0, 0);
    for (client, counts) in &plan {
        let a: u64 = counts.iter().map(|&n| n.min(10)).sum();
        let r: u64 = counts.iter().map(|&n| n.saturating_sub(10)).sum();
        allowed += a;
        rejected += r;
        // An IPv6 client is its /64 under the default `ipv6_prefix`.
        let key = if client.contains(':') {
            "2001:db8::/64".to_owned()
        } else {
            client.to_string()
        };
        per_client.push((client.to_string(), key, a + r, r));
    }
    let requests = allowed + rejected;

    let (doc, stderr) = report(&config, &log);
    assert_eq!(stderr, "");
    assert_eq!(doc["requests"], requests + 7);
    assert_eq!(doc["malformed"], 0);
    assert_eq!(doc["out_of_order"], 0);
    assert_eq!(doc["from"], "2024-05-01T12:00:00Z");
    let api = named(&doc["routes"], "api");
    assert_eq!(api["requests"], requests);
    assert_eq!(api["allowed"], allowed);
    assert_eq!(api["rejected"], rejected);
    assert_eq!(api["locked_out"], 0);
    assert_eq!(api["clients"], 5);
    assert_eq!(api["clients_locked_out"], 0);
    assert_eq!(
        api["busiest"],
        busiest(
            per_client
                .iter()
                .map(|(c, _, n, r)| (c.clone(), *n, *r, 0))
                .collect()
        )
    );
    let open = named(&doc["routes"], "open");
    assert_eq!(open["requests"], 7);
    assert_eq!(open["allowed"], 7);
    let limit = named(&doc["limits"], "per_minute");
    assert_eq!(limit["routes"], json!(["api"]));
    assert_eq!(limit["requests"], requests);
    assert_eq!(limit["allowed"], allowed);
    assert_eq!(limit["rejected"], rejected);
    assert_eq!(limit["clients"], 5);
    assert_eq!(
        limit["busiest"],
        busiest(
            per_client
                .iter()
                .map(|(_, k, n, r)| (k.clone(), *n, *r, 0))
                .collect()
        )
    );

    // The same figures as an aligned table.
    let out = simulate(&config, &log, false);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("ROUTE "))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(table.len(), 4, "{text}");
    assert!(
        table.iter().all(|l| l.len() == table[0].len()),
        "not aligned:\n{text}"
    );
    let row: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(
        row,
        [
            "api".to_owned(),
            requests.to_string(),
            allowed.to_string(),
            "0".into(),
            "0".into(),
            rejected.to_string(),
            "0".into(),
            "5".into(),
            "0".into()
        ]
    );
    assert!(table[3].starts_with("(no route) "), "{text}");
    let busy: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Busiest clients per route"))
        .find(|l| l.contains("198.51.100.4"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(busy, ["198.51.100.4", "52", "32", "0"], "{text}");
}

/// docs/configuration/limits.md lockouts over a fixed window, as a model independent of the
/// gateway's code: per request, `Ok`, `Rejected` or `LockedOut` (with
/// whether it started the lock).
#[derive(Debug, Default)]
struct LockoutModel {
    limit: u64,
    window: u64,
    after: u64,
    within: u64,
    duration: u64,
    escalate: u64,
    max: u64,
    counts: BTreeMap<u64, u64>,
    strikes: u64,
    strikes_since: u64,
    locked_until: u64,
    level: u32,
}

#[derive(Debug, PartialEq)]
enum Seen {
    Ok,
    Rejected,
    LockedOut { started: bool },
}

impl LockoutModel {
    fn request(&mut self, t: u64) -> Seen {
        if self.locked_until > t {
            return Seen::LockedOut { started: false };
        }
        let n = self.counts.entry(t - t % self.window).or_default();
        if *n < self.limit {
            *n += 1;
            return Seen::Ok;
        }
        // forget_after (24 h) never passes in this test.
        if self.strikes == 0 || t >= self.strikes_since + self.within {
            self.strikes = 0;
            self.strikes_since = t;
        }
        self.strikes += 1;
        if self.strikes < self.after {
            return Seen::Rejected;
        }
        let length = (self.duration * self.escalate.pow(self.level)).min(self.max);
        self.locked_until = t + length;
        self.level += 1;
        self.strikes = 0;
        Seen::LockedOut { started: true }
    }
}

#[test]
fn lockouts_escalate_as_modelled() {
    let d = dir("lockout");
    let config = write(
        &d,
        "gateway.yaml",
        r#"
server:
  listen: ["127.0.0.1:0"]
routes:
  - name: login
    match: { exact: /login, methods: [POST] }
    respond: { status: 200 }
    limits:
      - name: login
        algorithm: fixed_window
        limit: 3
        window: 1m
        key: client_ip
        lockout: { after: 2, within: 1m, duration: 2m, escalate: 2, max_duration: 10m }
"#,
    );
    let mut model = LockoutModel {
        limit: 3,
        window: 60,
        after: 2,
        within: 60,
        duration: 120,
        escalate: 2,
        max: 600,
        ..Default::default()
    };
    // A guesser every 5 s for an hour; a user twice a minute.
    let mut lines = Vec::new();
    let (mut ok, mut rejected, mut locked, mut lockouts) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..720u64 {
        let t = T0 + 5 * i;
        lines.push(line(json!(t), "203.0.113.66", "POST", "/login"));
        match model.request(t) {
            Seen::Ok => ok += 1,
            Seen::Rejected => rejected += 1,
            Seen::LockedOut { started } => {
                locked += 1;
                lockouts += u64::from(started);
            }
        }
        if i % 6 == 3 {
            lines.push(line(json!(t), "203.0.113.7", "POST", "/login"));
        }
    }
    assert!(lockouts >= 5 && rejected > 0, "a weak scenario: {model:?}");
    let log = write(&d, "requests.log", &log_text(&lines));
    let (doc, _) = report(&config, &log);
    let route = named(&doc["routes"], "login");
    assert_eq!(route["requests"], 720 + 120);
    assert_eq!(route["allowed"], ok + 120);
    assert_eq!(route["rejected"], rejected);
    assert_eq!(route["locked_out"], locked);
    assert_eq!(route["clients_locked_out"], 1);
    assert_eq!(
        route["busiest"],
        busiest(vec![
            ("203.0.113.66".into(), 720, rejected, locked),
            ("203.0.113.7".into(), 120, 0, 0),
        ])
    );
    let limit = named(&doc["limits"], "login");
    assert_eq!(limit["lockouts"], lockouts);
    assert_eq!(limit["locked_out"], locked);
    assert_eq!(limit["rejected"], rejected);
    assert_eq!(limit["clients"], 2);
    assert_eq!(limit["clients_locked_out"], 1);
}

#[test]
fn the_gateways_access_log_replays() {
    let d = dir("access-log");
    let config = write(
        &d,
        "gateway.yaml",
        r#"
server:
  listen: ["127.0.0.1:0"]
routes:
  - name: api
    match: { hosts: ["api.example.com"] }
    respond: { status: 200 }
    limits:
      - { algorithm: fixed_window, limit: 2, window: 1m, key: client_ip }
  - name: www
    match: { path: / }
    respond: { status: 200 }
"#,
    );
    // The fields `tollgate::log::AccessRecord::emit` writes, and other events.
    let access = |secs: f64, client: &str, host: &str, path: &str| {
        json!({
            "timestamp": rfc3339(secs), "level": "INFO", "message": "access",
            "request_id": "0f3c", "client": client, "method": "GET", "host": host,
            "path": path, "route": "", "upstream": "", "status": 200, "limit": "none",
            "duration_ms": 0.12, "bytes": 3, "completed": true, "target": "tollgate::access"
        })
    };
    let t = T0 as f64;
    let lines = vec![
        json!({"timestamp": rfc3339(t), "level": "INFO", "message": "listening",
               "addr": "127.0.0.1:8080", "target": "tollgate::server"}),
        access(t + 1.25, "10.0.0.1", "api.example.com:8080", "/a"),
        access(t + 2.5, "10.0.0.1", "API.example.com", "/b"),
        access(t + 3.0, "10.0.0.1", "api.example.com", "/c"),
        access(t + 4.0, "10.0.0.1", "api.example.com", "/d"),
        access(t + 5.0, "10.0.0.2", "", "/"),
        access(t + 6.0, "10.0.0.2", "www.example.com", "/x"),
        json!({"timestamp": rfc3339(t + 7.0), "level": "WARN", "message": "limit store unavailable",
               "target": "tollgate_limit::limiter"}),
        access(t + 61.0, "10.0.0.1", "api.example.com", "/e"),
    ];
    let log = write(&d, "access.log", &log_text(&lines));
    let (doc, _) = report(&config, &log);
    assert_eq!(doc["lines"], 9);
    assert_eq!(doc["requests"], 7);
    assert_eq!(doc["not_requests"], 2);
    assert_eq!(doc["malformed"], 0);
    assert_eq!(doc["from"], "2024-05-01T12:00:01.250000Z");
    assert_eq!(doc["to"], "2024-05-01T12:01:01Z");
    let api = named(&doc["routes"], "api");
    assert_eq!(api["requests"], 5);
    assert_eq!(api["allowed"], 3);
    assert_eq!(api["rejected"], 2);
    let www = named(&doc["routes"], "www");
    assert_eq!(www["requests"], 2);
    assert_eq!(www["allowed"], 2);
}

const EVERYTHING: &str = r#"
server:
  listen: ["127.0.0.1:0"]
  deny: ["192.0.2.0/24"]
  trusted_proxies: ["10.255.0.1/32"]
limits:
  strict:
    algorithm: fixed_window
    limit: 2
    window: 1m
    key: client_ip
    exempt: ["10.1.0.0/16"]
    overrides: [{ match: "header:x-plan=gold", limit: 4 }]
  watch:
    algorithm: fixed_window
    limit: 1
    window: 1m
    key: client_ip
    mode: shadow
  wide:
    algorithm: fixed_window
    limit: 100
    window: 1m
    key: global
routes:
  - name: a
    match: { path: /a }
    respond: { status: 200 }
    limits: [strict, watch, wide]
  - name: b
    match: { path: /b }
    respond: { status: 200 }
    limits:
      - { algorithm: token_bucket, rate: 1/s, burst: 1, max_delay: 2s, key: "query:k", on_missing_key: skip }
  - name: c
    match: { path: /c }
    respond: { status: 200 }
    limits:
      - { name: conc, algorithm: concurrency, limit: 1, key: "header:x-user", on_missing_key: deny }
"#;

#[test]
fn json_report_is_exact() {
    let d = dir("json");
    let config = write(&d, "gateway.yaml", EVERYTHING);
    let at = |s: u64| json!(T0 + s);
    let with = |mut l: Value, headers: Value| {
        l["headers"] = headers;
        l
    };
    let gold = json!({"x-plan": "gold"});
    let lines = [
        line(at(0), "1.1.1.1", "GET", "/a"),
        line(at(1), "1.1.1.1", "GET", "/a"),
        line(at(2), "1.1.1.1", "GET", "/a/x"),
        line(at(3), "10.1.2.3", "GET", "/a"),
        with(line(at(4), "2.2.2.2", "GET", "/a"), gold.clone()),
        with(line(at(5), "2.2.2.2", "GET", "/a"), gold.clone()),
        with(line(at(6), "2.2.2.2", "GET", "/a"), gold),
        line(at(7), "192.0.2.9", "GET", "/a"),
        with(
            line(at(8), "10.255.0.1", "GET", "/a"),
            json!({"X-Forwarded-For": "192.0.2.5"}),
        ),
        with(
            line(at(9), "10.255.0.1", "GET", "/a"),
            json!({"x-forwarded-for": "3.3.3.3"}),
        ),
        json!("garbage"),
        line(at(10), "1.1.1.1", "GET", "/b?k=abc"),
        line(at(10), "1.1.1.1", "GET", "/b?k=abc"),
        line(at(10), "1.1.1.1", "GET", "/b"),
        with(
            line(at(11), "4.4.4.4", "GET", "/c"),
            json!({"x-user": "u1"}),
        ),
        with(
            line(at(11), "4.4.4.4", "GET", "/c"),
            json!({"x-user": "u1"}),
        ),
        line(at(11), "4.4.4.4", "GET", "/c"),
        line(at(12), "5.5.5.5", "GET", "/zzz"),
        line(at(12), "5.5.5.5", "GET", "/a/../../x"),
        json!({"timestamp": "2024-05-01T12:00:12Z", "level": "INFO", "message": "reloaded"}),
        line(at(5), "6.6.6.6", "GET", "/%61"),
    ];
    let mut text = log_text(&lines);
    text = text.replace("\"garbage\"", "garbage");
    let log = write(&d, "requests.log", &text);
    let (mut doc, stderr) = report(&config, &log);

    let source = log.display().to_string();
    assert_eq!(doc["source"], source.as_str());
    let error = doc["errors"][0]["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("not a JSON request: "), "{error}");
    assert_eq!(
        stderr,
        format!(
            "{source}:11: {error}\n{source}: warning: not in time order (1 lines up to 7.000 s early, \
             replayed at the latest time seen); sort it by time for a faithful replay\n"
        )
    );
    doc["source"] = json!("LOG");
    doc["errors"][0]["error"] = json!("ERROR");

    let c = |client: &str, n: u64, r: u64| json!({"client": client, "requests": n, "rejected": r, "locked_out": 0});
    let route = |name: &str, counts: [u64; 8], busiest: Value| {
        let [requests, allowed, delayed, shadow_rejected, rejected, locked_out, clients, locked] =
            counts;
        json!({
            "name": name, "requests": requests, "allowed": allowed, "delayed": delayed,
            "shadow_rejected": shadow_rejected, "rejected": rejected, "locked_out": locked_out,
            "clients": clients, "clients_locked_out": locked, "busiest": busiest,
        })
    };
    let limit = |name: &str,
                 algorithm: &str,
                 mode: &str,
                 route: &str,
                 counts: [u64; 13],
                 busiest: Value| {
        let [requests, allowed, exempt, skipped, delayed, shadow_rejected, not_consumed, rejected, missing_key, locked_out, lockouts, clients, locked] =
            counts;
        json!({
            "name": name, "algorithm": algorithm, "mode": mode, "per_key": null, "routes": [route],
            "requests": requests, "allowed": allowed, "exempt": exempt, "skipped": skipped,
            "delayed": delayed, "shadow_rejected": shadow_rejected, "not_consumed": not_consumed,
            "rejected": rejected, "missing_key": missing_key, "locked_out": locked_out,
            "lockouts": lockouts, "clients": clients, "clients_locked_out": locked,
            "busiest": busiest,
        })
    };
    let expected = json!({
        "source": "LOG",
        "lines": 21,
        "requests": 19,
        "not_requests": 1,
        "malformed": 1,
        "errors": [{"line": 11, "error": "ERROR"}],
        "from": "2024-05-01T12:00:00Z",
        "to": "2024-05-01T12:00:12Z",
        "out_of_order": 1,
        "out_of_order_max_seconds": 7.0,
        "denied": 2,
        "invalid_path": 1,
        "refused": 0,
        "routes": [
            route("a", [9, 8, 0, 3, 1, 0, 5, 0], json!([
                c("1.1.1.1", 3, 1), c("2.2.2.2", 3, 0), c("10.1.2.3", 1, 0),
                c("3.3.3.3", 1, 0), c("6.6.6.6", 1, 0),
            ])),
            route("b", [3, 3, 1, 0, 0, 0, 1, 0], json!([c("1.1.1.1", 3, 0)])),
            route("c", [3, 2, 0, 0, 1, 0, 1, 0], json!([c("4.4.4.4", 3, 1)])),
            route("(no route)", [1, 0, 0, 0, 0, 0, 1, 0], json!([c("5.5.5.5", 1, 0)])),
        ],
        "limits": [
            limit("strict", "fixed_window", "enforce", "a",
                [9, 8, 1, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0],
                json!([c("1.1.1.1", 3, 1), c("2.2.2.2", 3, 0), c("3.3.3.3", 1, 0), c("6.6.6.6", 1, 0)])),
            limit("watch", "fixed_window", "shadow", "a",
                [9, 9, 0, 0, 0, 4, 0, 0, 0, 0, 0, 5, 0],
                json!([c("1.1.1.1", 3, 0), c("2.2.2.2", 3, 0), c("10.1.2.3", 1, 0),
                       c("3.3.3.3", 1, 0), c("6.6.6.6", 1, 0)])),
            limit("wide", "fixed_window", "enforce", "a",
                [9, 9, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
                json!([c("global", 9, 0)])),
            limit("b.0", "token_bucket", "enforce", "b",
                [3, 3, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0],
                json!([c("abc", 2, 0)])),
            limit("conc", "concurrency", "enforce", "c",
                [3, 2, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0],
                json!([c("u1", 2, 0)])),
        ],
    });
    assert_eq!(
        doc,
        expected,
        "got:\n{}",
        serde_json::to_string_pretty(&doc).unwrap()
    );
}

#[test]
fn malformed_lines_are_reported_by_number_and_skipped() {
    let d = dir("malformed");
    let config = write(&d, "gateway.yaml", PER_MINUTE);
    let good = |s: u64| format!("{}\n", line(json!(T0 + s), "198.51.100.1", "GET", "/api"));
    let mut text = String::new();
    text += &good(0);
    text += "{\"ts\": 1, \"client\": \"1.2.3.4\"\n"; // 2: cut short
    text += &good(1);
    text += "\n"; // 4: blank, ignored
    text += r#"{"ts":"yesterday","client":"1.2.3.4","method":"GET","path":"/api"}"#; // 5
    text += "\n";
    text += r#"{"ts":1714564800,"client":"localhost","method":"GET","path":"/api"}"#; // 6
    text += "\n";
    text += r#"{"ts":1714564800,"client":"1.2.3.4","method":"G T","path":"/api"}"#; // 7
    text += "\n";
    text += r#"{"ts":1714564800,"client":"1.2.3.4","method":"GET"}"#; // 8
    text += "\n";
    text += r#"{"ts":1714564800,"client":"1.2.3.4","method":"GET","path":"/api","headers":{"bad name":"x"}}"#; // 9
    text += "\n";
    text += "\u{FFFD}\u{0}\n"; // 10
    text += &good(2);
    let log = write(&d, "requests.log", &text);

    let out = simulate(&config, &log, false);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let p = log.display().to_string();
    let reported: Vec<&str> = stderr.lines().collect();
    assert_eq!(reported.len(), 7, "{stderr}");
    for (line, want) in reported.iter().zip([
        "2: not a JSON request: EOF",
        "5: `ts`: not an RFC 3339 time",
        "6: `client`: not an IP address: \"localhost\"",
        "7: `method`: not a method",
        "8: missing `path`",
        "9: `headers`: bad header name \"bad name\"",
        "10: not a JSON request",
    ]) {
        assert!(line.starts_with(&format!("{p}:{want}")), "{line} vs {want}");
    }
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with(&format!(
            "Replayed 3 requests from {p} (11 lines, 7 malformed and skipped)\n"
        )),
        "{stdout}"
    );

    // Past the first 20, a count.
    let many: String = (0..25).map(|i| format!("bad {i}\n")).collect::<String>() + &good(0);
    let log = write(&d, "many.log", &many);
    let (doc, stderr) = report(&config, &log);
    assert_eq!(doc["malformed"], 25);
    assert_eq!(doc["requests"], 1);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 20);
    assert_eq!(doc["errors"][19]["line"], 20);
    let last = stderr.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "{}: 25 malformed lines in all (the first 20 shown)",
            log.display()
        )
    );
}

#[test]
fn standard_input_is_read_with_a_dash() {
    let d = dir("stdin");
    let config = write(&d, "gateway.yaml", PER_MINUTE);
    let text = log_text(
        &(0..12)
            .map(|i| line(json!(T0 + i), "198.51.100.1", "GET", "/api"))
            .collect::<Vec<_>>(),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["simulate", "--json", "-c", config.to_str().unwrap(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["source"], "-");
    let api = named(&doc["routes"], "api");
    assert_eq!((&api["allowed"], &api["rejected"]), (&json!(10), &json!(2)));
}

#[test]
fn a_missing_log_or_a_bad_config_exits_1() {
    let d = dir("failures");
    let config = write(&d, "gateway.yaml", PER_MINUTE);
    let missing = d.join("nope.log");
    let out = simulate(&config, &missing, false);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with(&format!("error: cannot open {}: ", missing.display())),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let log = write(&d, "requests.log", "");
    let bad = write(
        &d,
        "bad.yaml",
        "routes:\n  - name: x\n    match: { path: / }\n    respond: { status: 200 }\n    limits: [nope]\n",
    );
    let out = simulate(&bad, &log, false);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("error: ") && stderr.contains("nope"),
        "{stderr}"
    );

    let out = simulate(&d.join("absent.yaml"), &log, false);
    assert_eq!(out.status.code(), Some(1));

    // An empty log is a valid, empty replay.
    let (doc, _) = report(&config, &log);
    assert_eq!(doc["requests"], 0);
    assert_eq!(doc["from"], Value::Null);
    assert_eq!(named(&doc["routes"], "(no route)")["requests"], 0);
}

/// The performance target: a million lines in under 10 s. Run in release:
/// `cargo test --release --test simulate -- --ignored --nocapture`.
#[test]
#[ignore = "a timed run; see the doc comment"]
fn a_million_lines_replay_in_under_ten_seconds() {
    let d = dir("million");
    let config = write(&d, "gateway.yaml", PER_MINUTE);
    let path = d.join("requests.log");
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut seed = 7u64;
        for i in 0..1_000_000u64 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let c = (seed >> 33) % 20_000;
            let p = if (seed >> 20).is_multiple_of(4) {
                "/open"
            } else {
                "/api/items"
            };
            writeln!(
                w,
                r#"{{"ts":{}.{:03},"client":"198.51.{}.{}","method":"GET","path":"{p}","host":"api.example.com","headers":{{"user-agent":"curl/8"}}}}"#,
                T0 + i / 12,
                (i % 12) * 83,
                c / 256,
                c % 256
            )
            .unwrap();
        }
    }
    let started = std::time::Instant::now();
    let (doc, _) = report(&config, &path);
    let took = started.elapsed();
    assert_eq!(doc["requests"], 1_000_000);
    eprintln!(
        "1,000,000 lines in {:.2} s ({:.0} lines/s)",
        took.as_secs_f64(),
        1e6 / took.as_secs_f64()
    );
    if !cfg!(debug_assertions) {
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}
