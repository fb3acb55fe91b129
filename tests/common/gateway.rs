//! The real `tollgate` binary as a fixture.
//!
//! A config template is YAML with placeholders `@LISTEN@`, `@LISTEN2@`,
//! `@LISTEN3@` (traffic addresses) and `@ADMIN@` (the admin address). Each
//! becomes port 0 ([`LISTEN`], [`LISTEN2`], [`LISTEN3`], [`ADMIN`]: distinct
//! loopback IPs for the traffic ones, since the gateway keys listeners by
//! configured address), so the gateway binds a port no other process holds;
//! the fixture learns the bound addresses from the gateway's start-up log
//! (`"listening"` with `addr` and `local`, `"admin listening"` with `addr`),
//! which also covers listeners a reload adds.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::Method;
use serde_json::Value;

use super::client::{self, Resp};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// How long start-up may take before the test fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long an address lookup waits for the gateway's `listening` line.
pub const ADDR_TIMEOUT: Duration = Duration::from_secs(5);

/// What `@LISTEN@` becomes: `127.0.0.1:0`.
pub const LISTEN: SocketAddr = loopback(1);
/// What `@LISTEN2@` becomes: `127.0.0.2:0`.
pub const LISTEN2: SocketAddr = loopback(2);
/// What `@LISTEN3@` becomes: `127.0.0.3:0`.
pub const LISTEN3: SocketAddr = loopback(3);
/// What `@ADMIN@` becomes: `127.0.0.1:0`.
pub const ADMIN: SocketAddr = loopback(1);

const fn loopback(last: u8) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, last), 0))
}

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

pub use tollgate_testkit::temp_dir;

/// A running (or exited) gateway process.
pub struct Gateway {
    child: Child,
    dir: PathBuf,
    config_path: PathBuf,
    stdout: Arc<Output>,
    stderr: Arc<Output>,
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
        Self::spawn_inner(template, launch, None, &[])
    }

    /// Like [`Gateway::start`] with more environment variables (such as
    /// `SSL_CERT_FILE`, the roots a JWKS fetch trusts).
    pub async fn start_env(template: &str, envs: &[(&str, &str)]) -> Gateway {
        let mut gw = Self::spawn_inner(template, Launch::Flag, None, envs);
        gw.wait_ready().await;
        gw
    }

    /// Like [`Gateway::start`] with exactly `workers` worker threads
    /// (`TOKIO_WORKER_THREADS`), for a test whose counts depend on them.
    pub async fn start_workers(template: &str, workers: usize) -> Gateway {
        let mut gw = Self::spawn_inner(template, Launch::Flag, Some(workers), &[]);
        gw.wait_ready().await;
        gw
    }

    fn spawn_inner(
        template: &str,
        launch: Launch,
        workers: Option<usize>,
        envs: &[(&str, &str)],
    ) -> Gateway {
        let dir = temp_dir("gw");
        let config_path = dir.join("gateway.yaml");
        std::fs::write(&config_path, render(template)).expect("write config");
        let mut cmd = super::reaper::command(BIN);
        match workers {
            Some(n) => {
                cmd.env("TOKIO_WORKER_THREADS", n.to_string());
            }
            None => pick_scheduler(&mut cmd),
        }
        cmd.env("TOLLGATE_LOG", "info")
            .env_remove("TOLLGATE_CONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(&dir);
        cmd.envs(envs.iter().copied());
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
        let stdout = Output::collect(child.stdout.take().expect("stdout"));
        let stderr = Output::collect(child.stderr.take().expect("stderr"));
        Gateway {
            child,
            dir,
            config_path,
            stdout,
            stderr,
            exited: None,
        }
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

    /// The address bound for `@LISTEN@` (see [`Gateway::bound_addr`]).
    pub fn addr(&self) -> SocketAddr {
        self.bound_addr(LISTEN)
    }

    /// The address bound for `@LISTEN2@` (see [`Gateway::bound_addr`]).
    pub fn addr2(&self) -> SocketAddr {
        self.bound_addr(LISTEN2)
    }

    /// The address bound for `@LISTEN3@` (see [`Gateway::bound_addr`]).
    pub fn addr3(&self) -> SocketAddr {
        self.bound_addr(LISTEN3)
    }

    /// The traffic address the gateway bound for the `configured` one, from
    /// its latest `listening` line for it (a removed listener's address
    /// stays, so a test can see it refuse). Waits up to [`ADDR_TIMEOUT`] for
    /// the line (a reload may just have added the listener), then panics.
    pub fn bound_addr(&self, configured: SocketAddr) -> SocketAddr {
        self.stdout
            .wait_for(ADDR_TIMEOUT, |s| s.listening.get(&configured).copied())
            .unwrap_or_else(|| {
                panic!(
                    "no `listening` line for {configured} within {ADDR_TIMEOUT:?}\n{}",
                    self.output()
                )
            })
    }

    /// The admin address the gateway bound for `@ADMIN@`, from its `admin
    /// listening` line; waits up to [`ADDR_TIMEOUT`] for it, then panics.
    pub fn admin_addr(&self) -> SocketAddr {
        self.stdout
            .wait_for(ADDR_TIMEOUT, |s| s.admin)
            .unwrap_or_else(|| {
                panic!(
                    "no `admin listening` line within {ADDR_TIMEOUT:?}\n{}",
                    self.output()
                )
            })
    }

    /// The IPv4 TCP addresses the process listens on right now, sorted: read
    /// from `/proc` (its socket descriptors and the TCP table), not from its
    /// log.
    pub fn listening_sockets(&self) -> Vec<SocketAddr> {
        let pid = self.pid();
        let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("read the gateway's /proc fd dir")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter_map(|link| {
                let link = link.to_str()?;
                Some(
                    link.strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .to_string(),
                )
            })
            .collect();
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
            .expect("read the gateway's TCP table");
        // `sl local_address rem_address st ... inode`; st 0A is LISTEN.
        let mut out: Vec<SocketAddr> = table
            .lines()
            .skip(1)
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.get(3) != Some(&"0A") || !inodes.contains(*f.get(9)?) {
                    return None;
                }
                let (ip, port) = f[1].split_once(':')?;
                let ip = u32::from_str_radix(ip, 16).ok()?.to_le_bytes();
                Some(SocketAddr::from((ip, u16::from_str_radix(port, 16).ok()?)))
            })
            .collect();
        out.sort();
        out
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
        std::fs::write(&tmp, render(template)).expect("write config");
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
        self.stdout.state().lines.clone()
    }

    /// Every stderr line so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.state().lines.clone()
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

    /// An admin request, errors reported (also when the admin listener is
    /// not up yet).
    pub async fn try_admin(&self, method: Method, path: &str) -> Result<Resp, String> {
        let admin = self
            .stdout
            .state()
            .admin
            .ok_or("no `admin listening` line yet")?;
        let r = client::req(method, admin, path)
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

/// Fills the placeholders of a template.
fn render(template: &str) -> String {
    template
        .replace("@LISTEN@", &LISTEN.to_string())
        .replace("@LISTEN2@", &LISTEN2.to_string())
        .replace("@LISTEN3@", &LISTEN3.to_string())
        .replace("@ADMIN@", &ADMIN.to_string())
}

/// The lines of one of the process's output streams, collected by a
/// background thread, and the addresses its log lines said were bound.
#[derive(Default)]
struct Output {
    state: Mutex<OutputState>,
    /// Notified at every line.
    grew: Condvar,
}

#[derive(Default)]
struct OutputState {
    lines: Vec<String>,
    /// Configured traffic address -> the bound one, from the latest
    /// `listening` line for it.
    listening: HashMap<SocketAddr, SocketAddr>,
    /// From the `admin listening` line.
    admin: Option<SocketAddr>,
}

impl Output {
    /// Starts the thread reading `r`.
    fn collect(r: impl std::io::Read + Send + 'static) -> Arc<Output> {
        let output = Arc::new(Output::default());
        let sink = output.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                let mut state = sink.state();
                state.note_addresses(&line);
                state.lines.push(line);
                drop(state);
                sink.grew.notify_all();
            }
        });
        output
    }

    fn state(&self) -> MutexGuard<'_, OutputState> {
        self.state.lock().unwrap()
    }

    /// Waits up to `timeout` for `f` to find something in the state.
    fn wait_for<T>(&self, timeout: Duration, f: impl Fn(&OutputState) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        loop {
            if let Some(v) = f(&state) {
                return Some(v);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self.grew.wait_timeout(state, left).unwrap().0;
        }
    }
}

impl OutputState {
    /// Records the addresses of a `listening` or `admin listening` line.
    fn note_addresses(&mut self, line: &str) {
        if !line.contains("listening") {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let addr = |field: &str| v[field].as_str().and_then(|a| a.parse().ok());
        match v["message"].as_str() {
            Some("listening") => {
                if let (Some(configured), Some(local)) = (addr("addr"), addr("local")) {
                    self.listening.insert(configured, local);
                }
            }
            Some("admin listening") => self.admin = addr("addr"),
            _ => {}
        }
    }
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

/// Every other gateway the suites start runs with one worker thread; the
/// others with one per CPU, each thread with its own accept loops and idle
/// upstream connections (src/main.rs): the suites cover both. A
/// `TOKIO_WORKER_THREADS` in the test's environment wins.
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
    let mut cmd = super::reaper::command(BIN);
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
