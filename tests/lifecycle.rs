//! The process: hot reload (admin and SIGHUP, valid and invalid, listeners,
//! under load), the admin API, graceful shutdown, and the command line
//! (docs/operations.md).

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::gateway::{parse_metric, run_cli, temp_dir, Launch};
use common::one_route::targets;
use common::{client, eventually, raw, Echo, Gateway, OneRoute};
use http::Method;

const REPO_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.yaml");

/// Routes: `/e` to the echo, and respond routes named in `extra`.
fn cfg(echo: &Echo, extra: &[&str]) -> String {
    let e = OneRoute::new()
        .named("e")
        .matching("{ path: /e }")
        .upstream(echo);
    extra
        .iter()
        .fold(e, |gw, name| {
            gw.route(&format!(
                "{{ name: {name}, match: {{ exact: /{name} }}, respond: {{ status: 200, body: \"{name}\" }} }}"
            ))
        })
        .config()
}

fn is_sha256_hex(v: &serde_json::Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_rfc3339(v: &serde_json::Value) -> bool {
    // 2024-01-02T03:04:05[.fff](Z|+hh:mm)
    v.as_str().is_some_and(|s| {
        let b = s.as_bytes();
        b.len() >= 20
            && b[4] == b'-'
            && b[7] == b'-'
            && (b[10] == b'T' || b[10] == b't')
            && b[13] == b':'
            && b[16] == b':'
            && (s.ends_with('Z')
                || s.ends_with('z')
                || s[19..].contains('+')
                || s[19..].contains('-'))
    })
}

async fn metric0(gw: &Gateway, series: &str) -> f64 {
    gw.metric(series).await.unwrap_or(0.0)
}

const OK: &str = r#"tollgate_config_reloads_total{result="success"}"#;
const FAIL: &str = r#"tollgate_config_reloads_total{result="failure"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reload_adds_a_route_and_bumps_generation() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    let s0 = gw.config_state().await;
    let g0 = s0["generation"].as_u64().expect("generation");
    assert!(is_sha256_hex(&s0["sha256"]), "{s0}");
    assert!(is_rfc3339(&s0["loaded_at"]), "{s0}");
    assert!(s0["last_error"].is_null(), "{s0}");
    let ok0 = metric0(&gw, OK).await;
    assert_eq!(
        gw.metric("tollgate_config_generation").await,
        Some(g0 as f64)
    );

    client::get(gw.addr(), "/b")
        .await
        .assert_error(404, "no_route");
    gw.rewrite_config(&cfg(&echo, &["a", "b"]));
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        serde_json::json!({"result": "success", "generation": g0 + 1})
    );
    let b = client::get(gw.addr(), "/b").await;
    assert_eq!((b.status.as_u16(), b.text().as_str()), (200, "b"));
    assert_eq!(client::get(gw.addr(), "/a").await.status, 200);
    assert_eq!(client::get(gw.addr(), "/e/x").await.status, 200);

    let s1 = gw.config_state().await;
    assert_eq!(s1["generation"], g0 + 1);
    assert!(is_sha256_hex(&s1["sha256"]));
    assert_ne!(s1["sha256"], s0["sha256"], "sha256 must follow the file");
    assert!(s1["last_error"].is_null());
    assert_eq!(metric0(&gw, OK).await, ok0 + 1.0);
    assert_eq!(
        gw.metric("tollgate_config_generation").await,
        Some((g0 + 1) as f64)
    );

    // Reloading the same file: a new generation, the same digest.
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.json()["generation"], g0 + 2);
    let s2 = gw.config_state().await;
    assert_eq!(s2["sha256"], s1["sha256"]);
}

/// The threads of the gateway process (`/proc/PID/task`).
fn threads(gw: &Gateway) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", gw.pid()))
        .expect("the gateway's /proc entry")
        .count()
}

/// One worker and no access log: one thread, through traffic, the
/// once-a-second memory sweep and page purging (docs/performance.md); the
/// log writer's thread starts with the first line logged while serving,
/// and that line still reaches stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_logging_nothing_per_request_runs_one_thread() {
    let echo = Echo::start("e").await;
    let config = OneRoute::new()
        .named("e")
        .matching("{ path: /e }")
        .upstream(&echo)
        .limit(
            "per_client",
            "{ algorithm: fixed_window, limit: 1000, window: 1m }",
        )
        .config();
    let gw = Gateway::start_env(
        &config,
        &[
            ("TOKIO_WORKER_THREADS", "1"),
            ("TOLLGATE_LOG", "info,tollgate::access=off"),
        ],
    )
    .await;
    for _ in 0..50 {
        assert_eq!(client::get(gw.addr(), "/e").await.status, 200);
    }
    // Past a sweep and a purge.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        threads(&gw),
        1,
        "a one-worker gateway logging nothing per request"
    );

    let g0 = gw.generation().await;
    gw.sighup();
    eventually(Duration::from_secs(5), "the reload's log line", || async {
        gw.json_logs()
            .iter()
            .any(|l| l["message"] == "config reloaded")
            .then_some(())
    })
    .await;
    assert_eq!(gw.generation().await, g0 + 1);
    assert_eq!(
        threads(&gw),
        2,
        "the log writer's thread, started by that line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    let g0 = gw.generation().await;
    gw.rewrite_config(&cfg(&echo, &["a", "hup"]));
    gw.sighup();
    eventually(
        Duration::from_secs(5),
        "generation to advance after SIGHUP",
        || async { (gw.generation().await == g0 + 1).then_some(()) },
    )
    .await;
    let r = client::get(gw.addr(), "/hup").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_reload_changes_nothing_and_is_reported() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    let s0 = gw.config_state().await;
    let g0 = s0["generation"].as_u64().unwrap();
    let ok0 = metric0(&gw, OK).await;
    let fail0 = metric0(&gw, FAIL).await;

    // A route naming an upstream that does not exist, plus a new route.
    let bad = format!(
        "{}  - name: broken\n    match: {{ path: /broken }}\n    upstream: nope\n",
        cfg(&echo, &["a", "b"])
    );
    gw.rewrite_config(&bad);
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["result"], "failure", "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("nope")),
        "the error should name the problem: {v}"
    );
    // The old config keeps serving, unchanged.
    assert_eq!(client::get(gw.addr(), "/a").await.status, 200);
    assert_eq!(client::get(gw.addr(), "/e/1").await.status, 200);
    client::get(gw.addr(), "/b")
        .await
        .assert_error(404, "no_route");
    let s1 = gw.config_state().await;
    assert_eq!(s1["generation"], g0);
    assert_eq!(s1["sha256"], s0["sha256"]);
    assert!(
        s1["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "last_error must be set: {s1}"
    );
    assert_eq!(metric0(&gw, FAIL).await, fail0 + 1.0);
    assert_eq!(metric0(&gw, OK).await, ok0);

    // Not even YAML, by SIGHUP.
    gw.rewrite_config("routes: [ {{{ \n");
    gw.sighup();
    eventually(
        Duration::from_secs(5),
        "the failure counter after SIGHUP",
        || async { (metric0(&gw, FAIL).await == fail0 + 2.0).then_some(()) },
    )
    .await;
    assert_eq!(client::get(gw.addr(), "/a").await.status, 200);
    assert_eq!(gw.generation().await, g0);
    assert!(gw.admin_get("/readyz").await.status == 200);

    // Fixed: applies.
    gw.rewrite_config(&cfg(&echo, &["a", "b"]));
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(client::get(gw.addr(), "/b").await.status, 200);
    assert_eq!(gw.generation().await, g0 + 1);
}

/// Sends requests to `addr` in a loop until stopped; counts successes and
/// records failures.
struct Hammer {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Hammer {
    fn start(addr: std::net::SocketAddr, clients: usize, path: &'static str) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..clients {
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            tasks.push(tokio::spawn(async move {
                let c = if i % 2 == 0 {
                    client::h1()
                } else {
                    client::h2c()
                };
                while !stop.load(Ordering::SeqCst) {
                    let r = client::try_send(
                        &c,
                        client::req(Method::GET, addr, path)
                            .body(client::empty())
                            .unwrap(),
                    )
                    .await;
                    match r {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(r) => failures.lock().unwrap().push(format!(
                            "client {i}: {} {}",
                            r.status,
                            r.text()
                        )),
                        Err(e) => failures.lock().unwrap().push(format!("client {i}: {e}")),
                    }
                }
            }));
        }
        Hammer {
            stop,
            ok,
            failures,
            tasks,
        }
    }

    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(12), t).await;
        }
        let f = self.failures.lock().unwrap().clone();
        (self.ok.load(Ordering::SeqCst), f)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_are_added_and_removed_by_reload() {
    let echo = Echo::start("e").await;
    let with = |listen: &str| {
        OneRoute::new()
            .named("e")
            .upstream(&echo)
            .listen(listen)
            .config()
    };
    let gw = Gateway::start(&with(r#""@LISTEN@""#)).await;
    // @LISTEN2@ is port 0: it has no port to try before the gateway binds
    // it. The process (its sockets in /proc) listens on @LISTEN@ and
    // @ADMIN@ only.
    let mut before = vec![gw.addr(), gw.admin_addr()];
    before.sort();
    assert_eq!(
        gw.listening_sockets(),
        before,
        "@LISTEN2@ is not configured yet"
    );

    gw.rewrite_config(&with(r#""@LISTEN@", "@LISTEN2@""#));
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(client::get(gw.addr2(), "/new").await.status, 200);
    assert_eq!(client::get(gw.addr(), "/old").await.status, 200);

    // LISTEN2 stays; LISTEN goes. LISTEN2 serves throughout.
    let hammer = Hammer::start(gw.addr2(), 4, "/steady");
    tokio::time::sleep(Duration::from_millis(200)).await;
    gw.rewrite_config(&with(r#""@LISTEN2@""#));
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    eventually(
        Duration::from_secs(3),
        "the removed listener to refuse connections",
        || async { raw::refuses(gw.addr()).await.then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (ok, failures) = hammer.finish().await;
    assert!(
        failures.is_empty(),
        "the unchanged listener failed requests: {failures:?}"
    );
    assert!(ok > 20, "only {ok} requests went through");
    assert_eq!(gw.admin_get("/readyz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_listener_cannot_bind_changes_nothing() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    let g0 = gw.generation().await;
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap();
    let new = cfg(&echo, &["a", "b"]).replace(
        r#"listen: ["@LISTEN@"]"#,
        &format!(r#"listen: ["@LISTEN@", "{busy_addr}"]"#),
    );
    gw.rewrite_config(&new);
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["result"], "failure");
    assert_eq!(gw.generation().await, g0);
    client::get(gw.addr(), "/b")
        .await
        .assert_error(404, "no_route");
    assert_eq!(client::get(gw.addr(), "/a").await.status, 200);
    drop(busy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_finish_on_the_config_they_started_with() {
    let a = Echo::start("a").await;
    let b = Echo::start("b").await;
    let to = |e: &Echo| {
        OneRoute::new()
            .named("all")
            .upstream_at("u", &targets(&[e]))
            .config()
    };
    let gw = Gateway::start(&to(&a)).await;
    let addr = gw.addr();
    let slow = tokio::spawn(async move { client::get(addr, "/delay/1000").await });
    eventually(Duration::from_secs(3), "the slow request at a", || async {
        (a.in_flight() == 1).then_some(())
    })
    .await;
    gw.rewrite_config(&to(&b));
    assert_eq!(gw.admin_post("/reload").await.status, 200);
    let r = client::get(gw.addr(), "/after").await;
    assert_eq!(r.upstream(), "b");
    let r = slow.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.upstream(), "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_sighup_reloads_under_load_fail_no_request() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["v0"])).await;
    let g0 = gw.generation().await;
    let hammer = Hammer::start(gw.addr(), 4, "/e/load");
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 1..=30 {
        if i % 3 == 0 {
            gw.rewrite_config(&format!(
                "{}  - name: bad{i}\n    match: {{ path: /bad }}\n    upstream: missing\n",
                cfg(&echo, &[&format!("v{i}")])
            ));
        } else {
            gw.rewrite_config(&cfg(&echo, &[&format!("v{i}")]));
        }
        gw.sighup();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The 30th file was invalid: refused, and counted.
    eventually(
        Duration::from_secs(5),
        "a failed reload to be counted",
        || async { (metric0(&gw, FAIL).await >= 1.0).then_some(()) },
    )
    .await;
    assert!(gw.generation().await > g0);
    assert!(gw.config_state().await["last_error"].is_string());
    // A last valid file, still under load.
    gw.rewrite_config(&cfg(&echo, &["final"]));
    gw.sighup();
    eventually(
        Duration::from_secs(5),
        "the final config to be served",
        || async {
            let r = client::get(gw.addr(), "/final").await;
            (r.status == 200).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (ok, failures) = hammer.finish().await;
    assert!(
        failures.is_empty(),
        "{} failed requests during reloads, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok > 100, "only {ok} requests during 31 reloads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sighups_coalesces_and_keeps_serving() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    let g0 = gw.generation().await;
    gw.rewrite_config(&cfg(&echo, &["a", "burst"]));
    for _ in 0..20 {
        gw.sighup();
    }
    eventually(
        Duration::from_secs(5),
        "a reload after the burst",
        || async { (gw.generation().await > g0).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let g1 = gw.generation().await;
    assert!(g1 > g0 && g1 <= g0 + 20, "generation {g0} -> {g1}");
    assert_eq!(client::get(gw.addr(), "/burst").await.status, 200);
    assert_eq!(client::get(gw.addr(), "/e/x").await.status, 200);
    assert_eq!(gw.admin_get("/readyz").await.status, 200);
    assert_eq!(gw.admin_get("/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_answers_and_stays_off_the_traffic_port() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&cfg(&echo, &["a"])).await;
    assert_eq!(gw.admin_get("/healthz").await.status, 200);
    assert_eq!(gw.admin_get("/readyz").await.status, 200);
    let m = gw.admin_get("/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.header("content-type")
            .is_some_and(|v| v.starts_with("text/plain")),
        "{:?}",
        m.headers
    );
    let text = m.text();
    let g = gw.generation().await;
    assert_eq!(
        parse_metric(&text, "tollgate_config_generation"),
        Some(g as f64),
        "{text}"
    );
    let c = gw.config_state().await;
    for k in ["generation", "loaded_at", "sha256", "last_error"] {
        assert!(c.get(k).is_some(), "/config lacks {k}: {c}");
    }
    assert_eq!(gw.admin_get("/no-such-endpoint").await.status, 404);
    // GET /reload does not reload.
    let g = gw.generation().await;
    let r = gw.admin_get("/reload").await;
    assert!(
        r.status == 405 || r.status == 404,
        "GET /reload: {}",
        r.status
    );
    assert_eq!(gw.generation().await, g);
    // The traffic port knows nothing of the admin API.
    client::get(gw.addr(), "/healthz")
        .await
        .assert_error(404, "no_route");
    client::get(gw.addr(), "/metrics")
        .await
        .assert_error(404, "no_route");
    // And the admin port does not proxy.
    assert_eq!(gw.admin_get("/e/x").await.status, 404);
    assert_eq!(echo.count(), 0);
    // Both reload series exist from the start (so a rate or an alert on
    // failures works before the first one); no reload has failed yet.
    assert!(parse_metric(&text, OK).is_some(), "no {OK} series:\n{text}");
    assert_eq!(
        parse_metric(&text, FAIL),
        Some(0.0),
        "no {FAIL} series at 0:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    let echo = Echo::start("e").await;
    let mut gw = OneRoute::new()
        .named("e")
        .upstream(&echo)
        .server("shutdown_grace: 5s")
        .start()
        .await;
    // An idle keep-alive connection must not hold the exit up.
    let mut idle = raw::connect(gw.addr()).await;
    idle.write(b"GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        idle.read_response(Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );

    let addr = gw.addr();
    let in_flight = tokio::spawn(async move { client::get(addr, "/delay/1500").await });
    eventually(Duration::from_secs(3), "the request in flight", || async {
        (echo.in_flight() == 1).then_some(())
    })
    .await;
    let t0 = Instant::now();
    gw.sigterm();
    eventually(
        Duration::from_secs(1),
        "/readyz 503 while draining",
        || async {
            match gw.try_admin(Method::GET, "/readyz").await {
                Ok(r) if r.status == 503 => Some(()),
                _ => None,
            }
        },
    )
    .await;
    eventually(
        Duration::from_secs(1),
        "new connections refused",
        || async { raw::refuses(gw.addr()).await.then_some(()) },
    )
    .await;
    assert!(
        t0.elapsed() < Duration::from_millis(1400),
        "checks ran past the in-flight request"
    );
    let r = in_flight.await.unwrap();
    assert_eq!(
        r.status,
        200,
        "the in-flight request must complete: {}",
        r.text()
    );
    let status = gw
        .wait_exit(Duration::from_secs(6))
        .await
        .expect("tollgate did not exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    assert!(
        t0.elapsed() < Duration::from_millis(4000),
        "exit took {:?}: an idle connection held the drain",
        t0.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_grace_bounds_the_drain() {
    let echo = Echo::start("e").await;
    let mut gw = OneRoute::new()
        .named("e")
        .upstream(&echo)
        .upstream_keys("timeout: 60s")
        .server("shutdown_grace: 1s")
        .start()
        .await;
    let addr = gw.addr();
    let stuck = tokio::spawn(async move {
        client::try_send(
            &client::h1(),
            client::req(Method::GET, addr, "/delay/8000")
                .body(client::empty())
                .unwrap(),
        )
        .await
    });
    eventually(Duration::from_secs(3), "the request in flight", || async {
        (echo.in_flight() == 1).then_some(())
    })
    .await;
    let t0 = Instant::now();
    gw.sigterm();
    let status = gw
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("tollgate did not exit within shutdown_grace + 4 s");
    let took = t0.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_millis(3500),
        "exit after {took:?} with shutdown_grace 1s"
    );
    stuck.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_exits_0() {
    let echo = Echo::start("e").await;
    let mut gw = Gateway::start(&cfg(&echo, &["a"])).await;
    gw.sigint();
    let status = gw
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("tollgate did not exit after SIGINT");
    assert_eq!(status.code(), Some(0));
}

/// A file in its own temp directory; both go on drop.
struct TempFile {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl std::ops::Deref for TempFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_temp(name: &str, contents: &str) -> TempFile {
    let dir = temp_dir("cli");
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    TempFile { dir, path }
}

fn non_empty_lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn check_accepts_the_repo_gateway_yaml() {
    let (code, out, err) = run_cli(&["check", "-c", REPO_YAML], &[], None);
    assert_eq!(code, 0, "check {REPO_YAML}\nstdout: {out}\nstderr: {err}");
    assert!(!out.trim().is_empty(), "check should print a summary");
}

#[test]
fn a_bad_worker_thread_count_is_an_error_not_a_default() {
    for bad in ["0", "two", "-1", "100000"] {
        let (code, out, err) = run_cli(&["-c", REPO_YAML], &[("TOKIO_WORKER_THREADS", bad)], None);
        assert_eq!(
            code, 1,
            "TOKIO_WORKER_THREADS={bad}\nstdout: {out}\nstderr: {err}"
        );
        assert!(
            err.contains(&format!(
                "TOKIO_WORKER_THREADS must be a whole number from 1 to 1024, got \"{bad}\""
            )),
            "stderr: {err}"
        );
    }
}

const UNKNOWN_FIELD: &str = "server:
  listen: [\"127.0.0.1:1\"]
routes:
  - name: a
    match: { path: / }
    respond: { status: 200 }
  - name: b
    match: { path: /b }
    respondd: { status: 200 }
";

#[test]
fn check_rejects_an_unknown_field_with_file_line_column_and_path() {
    let p = write_temp("bad.yaml", UNKNOWN_FIELD);
    let path = p.display().to_string();
    let (code, out, err) = run_cli(&["check", "-c", &path], &[], None);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    let lines = non_empty_lines(&err);
    assert_eq!(
        lines.len(),
        1,
        "want exactly one stderr line, got {lines:?}"
    );
    assert!(
        lines[0].contains(&format!("{path}:9:5: routes[1]")),
        "want `{path}:9:5: routes[1]...`, got {:?}",
        lines[0]
    );
    assert!(lines[0].contains("respondd"), "{:?}", lines[0]);
}

#[test]
fn check_rejects_bad_values_naming_the_field() {
    for (yaml, line, field, needle) in [
        (
            "server:\n  listen: [\"127.0.0.1:1\"]\n  timeouts:\n    header_read: 10 parsecs\nroutes: []\n",
            4,
            "server.timeouts.header_read",
            "parsecs",
        ),
        (
            "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: a\n    match: { path: / }\n    upstream: nope\n",
            6,
            "routes[0].upstream",
            "nope",
        ),
        (
            "server:\n  listen: [\"127.0.0.1:1\"]\n  deny: [\"10.0.0.0/33\"]\nroutes: []\n",
            3,
            "server.deny[0]",
            "10.0.0.0/33",
        ),
        (
            "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: a\n    match: { regex: \"([\" }\n    respond: { status: 200 }\n",
            5,
            "routes[0].match.regex",
            "",
        ),
        (
            "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: a\n    match: { path: / }\n    respond: { status: 200 }\n  - name: a\n    match: { path: /x }\n    respond: { status: 200 }\n",
            7,
            "routes[1].name",
            "a",
        ),
    ] {
        let p = write_temp("bad.yaml", yaml);
        let path = p.display().to_string();
        let (code, out, err) = run_cli(&["check", "-c", &path], &[], None);
        assert_eq!(code, 1, "{field}: stdout: {out}\nstderr: {err}");
        let lines = non_empty_lines(&err);
        assert_eq!(lines.len(), 1, "{field}: want one stderr line, got {lines:?}");
        let l = lines[0];
        assert!(l.contains(&path), "{field}: the line should name the file: {l:?}");
        // The line (and column) when known, and then the right one.
        if l.contains(&format!("{path}:")) {
            assert!(
                l.contains(&format!("{path}:{line}:")),
                "{field}: want `{path}:{line}:...`, got {l:?}"
            );
        }
        assert!(l.contains(field), "{field}: the line should name the field: {l:?}");
        assert!(l.contains(needle), "{field}: {l:?} should quote {needle:?}");
    }
}

#[test]
fn check_warns_about_a_shadowed_route() {
    let p = write_temp(
        "shadow.yaml",
        "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: everything\n    match: { path: / }\n    respond: { status: 200 }\n  - name: never_reached\n    match: { path: /x }\n    respond: { status: 200 }\n",
    );
    let (code, out, err) = run_cli(&["check", "-c", &p.display().to_string()], &[], None);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let all = format!("{out}\n{err}");
    assert!(
        all.lines()
            .any(|l| l.starts_with("warning:") && l.contains("never_reached")),
        "want a `warning: ...never_reached...` line:\n{all}"
    );
}

#[test]
fn check_warns_about_the_local_clock_on_a_shared_store() {
    let yaml = |clock: &str| {
        format!(
            "server:\n  listen: [\"127.0.0.1:1\"]\nstore: {{ backend: redis, url: \"redis://127.0.0.1:1\"{clock} }}\nroutes:\n  - name: a\n    match: {{ path: / }}\n    respond: {{ status: 200 }}\n"
        )
    };
    for (clock, warned) in [
        (", clock: local", true),
        (", clock: store", false),
        ("", false),
    ] {
        let p = write_temp("clock.yaml", &yaml(clock));
        let (code, out, err) = run_cli(&["check", "-c", &p.display().to_string()], &[], None);
        assert_eq!(code, 0, "{clock:?}: stdout: {out}\nstderr: {err}");
        let all = format!("{out}\n{err}");
        let warning = all.lines().find(|l| {
            l.starts_with("warning: store.clock: local") && l.contains("over-admit without bound")
        });
        assert_eq!(warning.is_some(), warned, "{clock:?}:\n{all}");
    }
}

#[test]
fn check_reads_tollgate_config_when_no_flag() {
    let good = write_temp(
        "good.yaml",
        "server:\n  listen: [\"127.0.0.1:1\"]\nroutes:\n  - name: a\n    match: { path: / }\n    respond: { status: 200 }\n",
    );
    let (code, out, err) = run_cli(
        &["check"],
        &[("TOLLGATE_CONFIG", &good.display().to_string())],
        None,
    );
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let bad = write_temp("bad.yaml", UNKNOWN_FIELD);
    let (code, _, err) = run_cli(
        &["check"],
        &[("TOLLGATE_CONFIG", &bad.display().to_string())],
        None,
    );
    assert_eq!(code, 1, "TOLLGATE_CONFIG must be read: {err}");
    assert!(err.contains(&bad.display().to_string()), "{err}");
    // A missing file: exit 1, one line naming it.
    let holder = write_temp("present.yaml", "");
    let missing = holder.dir.join("missing.yaml");
    let (code, _, err) = run_cli(&["check", "-c", &missing.display().to_string()], &[], None);
    assert_eq!(code, 1);
    let lines = non_empty_lines(&err);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&missing.display().to_string()),
        "{lines:?}"
    );
}

#[test]
fn version_and_help() {
    let (code, out, err) = run_cli(&["--version"], &[], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("tollgate") && out.contains(env!("CARGO_PKG_VERSION")),
        "--version printed {out:?}"
    );
    let (code, out, err) = run_cli(&["--help"], &[], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("check"), "--help should list `check`: {out}");
    assert!(out.contains("-c"), "--help should list -c: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_exits_1_with_one_clear_line() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap();
    let mut gw = Gateway::spawn(
        &OneRoute::new()
            .named("a")
            .listen(&format!("\"{busy_addr}\""))
            .config(),
    );
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("tollgate kept running with its port in use");
    assert_eq!(status.code(), Some(1), "{}", gw.output());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = gw.stderr_lines();
    let lines: Vec<&String> = err.iter().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want one stderr line: {lines:?}");
    assert!(
        lines[0].contains(&busy_addr.to_string()),
        "the line should name {busy_addr}: {:?}",
        lines[0]
    );
    drop(busy);
}

/// The default gateway.yaml on a taken port: the line names the file, the
/// field and its line, and the variable that moves it.
#[test]
fn a_taken_port_in_the_default_config_names_the_variable_to_set() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let (code, _out, err) = run_cli(
        &["-c", REPO_YAML],
        &[
            ("TOLLGATE_LISTEN", busy_addr.as_str()),
            ("TOLLGATE_ADMIN_LISTEN", "127.0.0.1:0"),
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    let lines = non_empty_lines(&err);
    assert_eq!(lines.len(), 1, "want one stderr line: {lines:?}");
    let line_no = std::fs::read_to_string(REPO_YAML)
        .unwrap()
        .lines()
        .position(|l| l.contains("${TOLLGATE_LISTEN"))
        .unwrap()
        + 1;
    assert!(
        lines[0].contains(&format!("{REPO_YAML}:{line_no}:"))
            && lines[0].contains(&format!("server.listen[0]: cannot bind {busy_addr}: "))
            && lines[0].ends_with("set TOLLGATE_LISTEN to another address)"),
        "{:?}",
        lines[0]
    );
    drop(busy);
}

/// A field the build does not implement is refused by `check` and at
/// start-up, never accepted and ignored.
#[test]
fn check_refuses_what_this_build_does_not_implement() {
    for (yaml, field, line, message) in [
        // A field the chosen backend cannot honour is refused, not ignored.
        (
            "store:\n  backend: redis\n  urls: [\"redis://127.0.0.1:7000\"]\n",
            "store.urls",
            3,
            "`urls` (seed nodes, sentinels) are for redis_cluster",
        ),
        (
            "store:\n  backend: redis_cluster\n  urls: [\"rediss://127.0.0.1:7000\"]\n  tls: { server_name: redis.internal }\n",
            "store.tls.server_name",
            4,
            "not with redis_cluster",
        ),
    ] {
        let p = write_temp("unsupported.yaml", yaml);
        let path = p.display().to_string();
        let (code, out, err) = run_cli(&["check", "-c", &path], &[], None);
        assert_eq!(code, 1, "{field}: stdout {out} stderr {err}");
        assert!(
            err.contains(&format!("{path}:{line}:"))
                && err.contains(&format!("{field}: {message}")),
            "{field}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_at_start_up_exits_1_with_one_line() {
    let mut gw = Gateway::spawn(UNKNOWN_FIELD);
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("tollgate kept running with a bad config");
    assert_eq!(status.code(), Some(1), "{}", gw.output());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = gw.stderr_lines();
    let lines: Vec<&String> = err.iter().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want one stderr line: {lines:?}");
    let path = gw.config_path().display().to_string();
    assert!(
        lines[0].contains(&format!("{path}:9:5: routes[1]")),
        "{:?}",
        lines[0]
    );
}

/// The repo's gateway.yaml with its addresses replaced by placeholders.
fn repo_yaml_template() -> String {
    let text = std::fs::read_to_string(REPO_YAML).expect("read the repo's gateway.yaml");
    let mut v: serde_yaml::Value = serde_yaml::from_str(&text).expect("gateway.yaml is YAML");
    let server = v
        .get_mut("server")
        .and_then(|s| s.as_mapping_mut())
        .expect("gateway.yaml has a server section");
    server.insert(
        "listen".into(),
        serde_yaml::Value::Sequence(vec!["@LISTEN@".into()]),
    );
    server.remove("tls");
    let admin = v
        .as_mapping_mut()
        .unwrap()
        .entry("admin".into())
        .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
    admin
        .as_mapping_mut()
        .expect("admin is a mapping")
        .insert("listen".into(), "@ADMIN@".into());
    serde_yaml::to_string(&v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_gateway_yaml_serves_hello_from_the_working_directory() {
    assert!(
        Path::new(REPO_YAML).exists(),
        "the repo has no gateway.yaml"
    );
    let gw = Gateway::start_with(&repo_yaml_template(), Launch::Cwd).await;
    let r = client::get(gw.addr(), "/hello").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tollgate_config_env_is_used_to_start() {
    let gw = Gateway::start_with(
        &OneRoute::new()
            .named("env")
            .respond(r#"{ status: 200, body: "env" }"#)
            .config(),
        Launch::Env,
    )
    .await;
    assert_eq!(client::get(gw.addr(), "/").await.text(), "env");
}

/// Metric labels are only names from the config (routes, limits, upstreams,
/// targets) and fixed outcomes: no client value ever becomes a label, so the
/// number of series stays bounded however many clients, paths and header
/// values the traffic carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_labels_never_carry_client_values() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new()
        .named("e")
        .matching("{ path: /e }")
        .upstream(&echo)
        .limit(
            "per_user",
            r#"{ algorithm: fixed_window, limit: 2, window: 1m, key: "header:x-user" }"#,
        )
        .start()
        .await;
    let series = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count()
    };
    let send_round = |round: usize| {
        let addr = gw.addr();
        async move {
            for i in 0..30 {
                let user = format!("user-{round}-{i}-secret");
                let path = format!("/e/probe-{round}-{i}?q=client-{i}");
                for _ in 0..3 {
                    client::get_with(addr, &path, &[("x-user", &user)]).await;
                }
                client::get(addr, &format!("/unrouted-{round}-{i}")).await;
            }
        }
    };
    send_round(1).await;
    let first = gw.admin_get("/metrics").await.text();
    send_round(2).await;
    let second = gw.admin_get("/metrics").await.text();
    assert_eq!(
        series(&first),
        series(&second),
        "new clients, paths and header values must not add series"
    );
    // (The client address is 127.0.0.1 like the upstream target, a config
    // value, so the address cannot be told apart here; the series count is.)
    for leaked in ["user-", "secret", "probe-", "unrouted-", "client-"] {
        assert!(
            !second.contains(leaked),
            "a client value ({leaked}) reached /metrics:\n{second}"
        );
    }
    // The labels that are there: route, limit and upstream names and fixed words.
    assert!(
        second.contains(
            r#"tollgate_limit_decisions_total{route="e",limit="per_user",decision="rejected"} 60"#
        ),
        "{second}"
    );
    assert!(
        second.contains(r#"tollgate_requests_total{route="",status="404"} 60"#),
        "{second}"
    );
}
