//! The real `tollgate` binary as a fixture.
//!
//! A config template is YAML with placeholders `@LISTEN@`, `@LISTEN2@`,
//! `@LISTEN3@` (traffic addresses) and `@ADMIN@` (the admin address), each an
//! `127.0.0.1:<free port>` picked when the fixture is created and fixed for its
//! life, so `rewrite_config` can move listeners around.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use serde_json::Value;

use super::client::{self, Resp};
use super::free_addr;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// How long start-up may take before the test fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How the binary finds its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// `tollgate -c <file>`
    Flag,
    /// `TOLLGATE_CONFIG=<file> tollgate`
    Env,
    /// `tollgate` in a directory holding `gateway.yaml`
    Cwd,
}

/// A unique fresh directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "tollgate-test-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A running (or exited) gateway process.
pub struct Gateway {
    child: Child,
    dir: PathBuf,
    config_path: PathBuf,
    listen: SocketAddr,
    listen2: SocketAddr,
    listen3: SocketAddr,
    admin: SocketAddr,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    exited: Option<ExitStatus>,
}

impl Gateway {
    /// Writes the config, starts `tollgate -c <file>` and waits for
    /// `GET /readyz` = 200.
    pub async fn start(template: &str) -> Gateway {
        Self::start_with(template, Launch::Flag).await
    }

    /// Like [`Gateway::start`] with a choice of how the config is found.
    pub async fn start_with(template: &str, launch: Launch) -> Gateway {
        let mut gw = Self::spawn_with(template, launch);
        gw.wait_ready().await;
        gw
    }

    /// Writes the config and spawns the process without waiting.
    pub fn spawn(template: &str) -> Gateway {
        Self::spawn_with(template, Launch::Flag)
    }

    pub fn spawn_with(template: &str, launch: Launch) -> Gateway {
        let dir = temp_dir("gw");
        let config_path = dir.join("gateway.yaml");
        let mut addrs: Vec<SocketAddr> = Vec::new();
        while addrs.len() < 4 {
            let a = free_addr();
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
        let (listen, listen2, listen3, admin) = (addrs[0], addrs[1], addrs[2], addrs[3]);
        std::fs::write(
            &config_path,
            render(template, listen, listen2, listen3, admin),
        )
        .expect("write config");
        let mut cmd = Command::new(BIN);
        pick_scheduler(&mut cmd);
        cmd.env("TOLLGATE_LOG", "info")
            .env_remove("TOLLGATE_CONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(&dir);
        match launch {
            Launch::Flag => {
                cmd.arg("-c").arg(&config_path);
            }
            Launch::Env => {
                cmd.env("TOLLGATE_CONFIG", &config_path);
            }
            Launch::Cwd => {}
        }
        let mut child = cmd.spawn().expect("spawn tollgate");
        let stdout = collect_lines(child.stdout.take().expect("stdout"));
        let stderr = collect_lines(child.stderr.take().expect("stderr"));
        Gateway {
            child,
            dir,
            config_path,
            listen,
            listen2,
            listen3,
            admin,
            stdout,
            stderr,
            exited: None,
        }
    }

    /// Fills the placeholders of a template.
    pub fn render(&self, template: &str) -> String {
        render(
            template,
            self.listen,
            self.listen2,
            self.listen3,
            self.admin,
        )
    }

    /// Polls `/readyz` until 200; panics with the process output on timeout
    /// or if the process exits.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exited = Some(status);
                panic!(
                    "tollgate exited during start-up with {status}\n{}",
                    self.output()
                );
            }
            if let Ok(r) = self.try_admin(Method::GET, "/readyz").await {
                if r.status == 200 {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "tollgate not ready (GET /readyz != 200) after {READY_TIMEOUT:?}\n{}",
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first traffic address (`@LISTEN@`).
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// `@LISTEN2@`
    pub fn addr2(&self) -> SocketAddr {
        self.listen2
    }

    /// `@LISTEN3@`
    pub fn addr3(&self) -> SocketAddr {
        self.listen3
    }

    /// `@ADMIN@`
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Rewrites the config file (placeholders filled); does not reload.
    pub fn rewrite_config(&self, template: &str) {
        // Write-then-rename so a reload never sees a half-written file.
        let tmp = self.dir.join("gateway.yaml.tmp");
        std::fs::write(&tmp, self.render(template)).expect("write config");
        std::fs::rename(&tmp, &self.config_path).expect("rename config");
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -s {sig} failed");
    }

    pub fn sighup(&self) {
        self.signal("HUP");
    }

    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    pub fn sigint(&self) {
        self.signal("INT");
    }

    /// Every stdout line so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Every stderr line so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// stdout lines that are JSON objects.
    pub fn json_logs(&self) -> Vec<Value> {
        self.stdout_lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.is_object())
            .collect()
    }

    /// The access-log lines so far (`"message": "access"`, top level).
    pub fn access_logs(&self) -> Vec<Value> {
        self.json_logs()
            .into_iter()
            .filter(|v| v["message"] == "access")
            .collect()
    }

    /// Waits (up to 5 s) for an access-log line satisfying `pred`.
    pub async fn wait_access_log(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(v) = self.access_logs().into_iter().find(|v| pred(v)) {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "no access-log line for {what} within 5 s; stdout was:\n{}",
                    self.stdout_lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// stdout and stderr, for failure messages.
    pub fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout_lines().join("\n"),
            self.stderr_lines().join("\n")
        )
    }

    /// The resident set size (VmRSS) in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// Waits for the process to exit, up to `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exited {
            return Some(s);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.exited = Some(s);
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An admin request, errors reported.
    pub async fn try_admin(&self, method: Method, path: &str) -> Result<Resp, String> {
        let r = client::req(method, self.admin, path)
            .body(client::empty())
            .unwrap();
        client::try_send(&client::h1(), r).await
    }

    /// `GET` on the admin listener.
    pub async fn admin_get(&self, path: &str) -> Resp {
        self.try_admin(Method::GET, path)
            .await
            .unwrap_or_else(|e| panic!("admin GET {path}: {e}\n{}", self.output()))
    }

    /// `POST` on the admin listener.
    pub async fn admin_post(&self, path: &str) -> Resp {
        self.try_admin(Method::POST, path)
            .await
            .unwrap_or_else(|e| panic!("admin POST {path}: {e}\n{}", self.output()))
    }

    /// `GET /config` as JSON.
    pub async fn config_state(&self) -> Value {
        let r = self.admin_get("/config").await;
        assert_eq!(r.status, 200, "GET /config: {}", r.text());
        r.json()
    }

    /// `GET /config`'s generation.
    pub async fn generation(&self) -> u64 {
        let v = self.config_state().await;
        v["generation"]
            .as_u64()
            .unwrap_or_else(|| panic!("/config has no integer generation: {v}"))
    }

    /// The value of an unlabelled-or-labelled metric line, e.g.
    /// `tollgate_config_reloads_total{result="success"}`; `None` if absent.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let r = self.admin_get("/metrics").await;
        assert_eq!(r.status, 200, "GET /metrics");
        parse_metric(&r.text(), series)
    }
}

/// Finds `series value` in Prometheus text (labels compared as written).
pub fn parse_metric(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, rest) = l.rsplit_once(' ').map(|(a, b)| (a.trim(), b))?;
        // Allow an optional timestamp: "name value ts".
        if name == series {
            return rest.trim().parse().ok();
        }
        let (n2, v) = name.rsplit_once(' ')?;
        (n2.trim() == series).then(|| v.trim().parse().ok())?
    })
}

/// VmRSS of a process in KiB (0 if unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn render(
    template: &str,
    listen: SocketAddr,
    listen2: SocketAddr,
    listen3: SocketAddr,
    admin: SocketAddr,
) -> String {
    template
        .replace("@LISTEN@", &listen.to_string())
        .replace("@LISTEN2@", &listen2.to_string())
        .replace("@LISTEN3@", &listen3.to_string())
        .replace("@ADMIN@", &admin.to_string())
}

/// A background thread pushing each line of `r` into the returned vector.
fn collect_lines(r: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            match line {
                Ok(l) => sink.lock().unwrap().push(l),
                Err(_) => break,
            }
        }
    });
    lines
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            // Give the reader threads a moment, then show what the gateway said.
            std::thread::sleep(Duration::from_millis(50));
            let out = self.stdout_lines();
            let err = self.stderr_lines();
            let tail = |v: &[String]| v[v.len().saturating_sub(40)..].join("\n");
            eprintln!(
                "=== tollgate output (last 40 lines each) ===\n--- stdout ---\n{}\n--- stderr ---\n{}",
                tail(&out),
                tail(&err)
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every other gateway the suites start runs with one Tokio worker, that is
/// on the current-thread scheduler tollgate picks for it (src/main.rs); the
/// others on the multi-thread scheduler, one worker per CPU: the suites
/// cover both. A `TOKIO_WORKER_THREADS` in the test's environment wins.
fn pick_scheduler(cmd: &mut Command) {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none()
        && STARTED.fetch_add(1, Ordering::Relaxed).is_multiple_of(2)
    {
        cmd.env("TOKIO_WORKER_THREADS", "1");
    }
}

/// Runs `tollgate <args>` to completion (10 s deadline) and returns
/// (exit code, stdout, stderr).
pub fn run_cli(args: &[&str], envs: &[(&str, &str)], cwd: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("TOLLGATE_CONFIG")
        .env("TOLLGATE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let child = cmd.spawn().expect("spawn tollgate");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(out)) => (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Ok(Err(e)) => panic!("tollgate {args:?}: {e}"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("tollgate {args:?} did not finish within 10 s");
        }
    }
}
