//! A real `redis-server` for the Redis store's tests: no mocks. It keeps
//! nothing on disk (`--save "" --appendonly no`, a temp dir), can be killed,
//! restarted on the same port, and paused with SIGSTOP to play a server that
//! accepts connections but never answers. It offers a blocking connection
//! for sync tests and a few async inspection helpers (SCAN, PTTL, INFO
//! commandstats) for async ones.
//!
//! Starting is synchronous (spawn, then poll with short sleeps), so async
//! tests call [`RedisServer::start`] too.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::temp_dir;

/// How long `redis-server` may take to answer after a (re)start.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many ports [`RedisServer::start`] tries before it gives up.
const START_ATTEMPTS: usize = 10;

/// Every inspection call must finish within this.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// One `redis-server` process, killed when dropped (its directory removed).
pub struct RedisServer {
    process: Arc<Process>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers. A port
    /// taken between the pick and redis-server's bind makes it exit at once:
    /// then another port is tried.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with more `redis-server` arguments (cluster
    /// mode, a TLS port...); they are given again on every restart.
    pub fn start_with(extra: &[String]) -> RedisServer {
        for _ in 0..START_ATTEMPTS {
            let process = Process {
                port: free_port(),
                dir: temp_dir("redis"),
                child: Mutex::new(None),
                extra: extra.to_vec(),
                sentinel: false,
            };
            if process.spawn() {
                return RedisServer {
                    process: Arc::new(process),
                };
            }
        }
        panic!("redis-server exited at start-up on {START_ATTEMPTS} ports in a row");
    }

    /// A Redis Sentinel (`redis-server <conf> --sentinel`) on a free port
    /// that monitors the master `name` at `master_port` with a quorum of
    /// `quorum`: down after 1 s without an answer, a failover given 3 s.
    /// Sentinel rewrites its config file, which lives in its directory and
    /// is kept across restarts.
    pub fn sentinel(name: &str, master_port: u16, quorum: u8) -> RedisServer {
        RedisServer::sentinel_with(name, master_port, quorum, "")
    }

    /// [`RedisServer::sentinel`] with more lines of config (a TLS port...).
    pub fn sentinel_with(name: &str, master_port: u16, quorum: u8, extra: &str) -> RedisServer {
        for _ in 0..START_ATTEMPTS {
            let process = Process {
                port: free_port(),
                dir: temp_dir("sentinel"),
                child: Mutex::new(None),
                extra: Vec::new(),
                sentinel: true,
            };
            let conf = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\nloglevel warning\nset-proc-title no\n\
                 dir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n{extra}\n",
                port = process.port,
                dir = process.dir.display(),
            );
            std::fs::write(process.conf(), conf).expect("write sentinel.conf");
            if process.spawn() {
                return RedisServer {
                    process: Arc::new(process),
                };
            }
        }
        panic!("redis-sentinel exited at start-up on {START_ATTEMPTS} ports in a row");
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.process.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.process.port
    }

    /// The server's directory (its `nodes.conf` in cluster mode).
    pub fn dir(&self) -> &std::path::Path {
        &self.process.dir
    }

    /// A blocking connection to this server.
    pub fn connection(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url())
            .expect("a valid url")
            .get_connection_with_timeout(CALL_TIMEOUT)
            .expect("connect to the test redis")
    }

    /// Kills the server (SIGKILL, which ends a paused one too) and reaps it.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Pauses the server (SIGSTOP): connections open, nothing answered.
    pub fn stop(&self) {
        self.process.signal("STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn cont(&self) {
        self.process.signal("CONT");
    }

    /// Kills the server (if running) and starts a new, empty one on the same
    /// port, waiting until it answers. Blocks the calling thread.
    pub fn restart(&self) {
        self.process.restart();
    }

    /// [`RedisServer::restart`] on a blocking thread, so the caller's Tokio
    /// worker keeps running other tasks meanwhile.
    pub async fn restart_async(&self) {
        let process = self.process.clone();
        tokio::task::spawn_blocking(move || process.restart())
            .await
            .expect("restart redis-server");
    }

    /// A fresh multiplexed connection (3 s deadline).
    pub async fn conn(&self) -> ::redis::aio::MultiplexedConnection {
        let client = ::redis::Client::open(self.url()).expect("a valid url");
        tokio::time::timeout(CALL_TIMEOUT, client.get_multiplexed_async_connection())
            .await
            .expect("redis connect timed out")
            .expect("redis connect")
    }

    /// Runs one command (3 s deadline).
    pub async fn cmd<T: ::redis::FromRedisValue>(&self, args: &[&str]) -> T {
        run(&mut self.conn().await, args).await
    }

    /// Every key (SCAN), sorted.
    pub async fn keys(&self) -> Vec<String> {
        let mut conn = self.conn().await;
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        loop {
            let (next, batch): (String, Vec<String>) =
                run(&mut conn, &["SCAN", &cursor, "COUNT", "1000"]).await;
            keys.extend(batch);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// `PTTL key` in milliseconds (-1: no TTL, -2: no key).
    pub async fn pttl(&self, key: &str) -> i64 {
        self.cmd(&["PTTL", key]).await
    }

    /// `CONFIG RESETSTAT`.
    pub async fn reset_stats(&self) {
        let _: String = self.cmd(&["CONFIG", "RESETSTAT"]).await;
    }

    /// `INFO commandstats`, by command name.
    pub async fn command_stats(&self) -> BTreeMap<String, CommandStat> {
        let text: String = self.cmd(&["INFO", "commandstats"]).await;
        parse_command_stats(&text)
    }
}

/// One `cmdstat_*` line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStat {
    /// Calls.
    pub calls: u64,
    /// Calls that failed inside the command (an error reply).
    pub failed_calls: u64,
    /// Calls refused before running (wrong arity, ...).
    pub rejected_calls: u64,
}

/// The server's port, directory and process (none while killed); dropping
/// it kills the process and removes the directory.
struct Process {
    port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
    /// More arguments, after the harness's own.
    extra: Vec<String>,
    /// A sentinel: started from its config file ([`Process::conf`]).
    sentinel: bool,
}

impl Process {
    /// Spawns `redis-server` on the port and waits until this very process
    /// answers; false if it exited first (it could not bind the port).
    fn spawn(&self) -> bool {
        let mut command = crate::reaper::command("redis-server");
        if self.sentinel {
            command.arg(self.conf()).arg("--sentinel");
        } else {
            command
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--protected-mode", "no", "--loglevel", "warning"])
                // A process title would be written over the environment,
                // where tests/run looks for its mark (sentinels too).
                .args(["--set-proc-title", "no"])
                .arg("--dir")
                .arg(&self.dir)
                .args(&self.extra);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (install it: apt-get install -y redis-server)");
        let pid = child.id();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            // Another redis-server may own the port: only ours counts.
            if self.answering_pid() == Some(pid) {
                *self.child.lock().unwrap() = Some(child);
                return true;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-server on port {} did not answer within {READY_TIMEOUT:?}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A sentinel's config file.
    fn conf(&self) -> PathBuf {
        self.dir.join("sentinel.conf")
    }

    /// The `process_id` of the server answering `INFO server` on the port.
    fn answering_pid(&self) -> Option<u32> {
        let timeout = Duration::from_millis(200);
        let client = ::redis::Client::open(format!("redis://127.0.0.1:{}/0", self.port)).ok()?;
        let mut conn = client.get_connection_with_timeout(timeout).ok()?;
        conn.set_read_timeout(Some(timeout)).ok()?;
        let info: String = ::redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("process_id:"))
            .and_then(|pid| pid.parse().ok())
    }

    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new one on the same port, retrying for
    /// 5 s while the port is not free again.
    fn restart(&self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self
            .child
            .lock()
            .unwrap()
            .as_ref()
            .map(Child::id)
            .expect("redis-server is running");
        let status = Command::new("kill")
            .args(["-s", sig, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {sig} {pid} failed");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port that was free a moment ago (bind `127.0.0.1:0`, read it, drop it).
/// redis-server cannot be told to pick its own port, so this race stays:
/// [`RedisServer::start`] retries on another port when it is lost.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Parses `cmdstat_fcall:calls=3,usec=...,rejected_calls=0,failed_calls=0`
/// lines.
fn parse_command_stats(text: &str) -> BTreeMap<String, CommandStat> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let mut stat = CommandStat::default();
        for (k, v) in fields.split(',').filter_map(|kv| kv.split_once('=')) {
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "calls" => stat.calls = v,
                "failed_calls" => stat.failed_calls = v,
                "rejected_calls" => stat.rejected_calls = v,
                _ => {}
            }
        }
        out.insert(name.to_string(), stat);
    }
    out
}

/// Runs one command on `conn` (3 s deadline).
async fn run<T: ::redis::FromRedisValue>(
    conn: &mut ::redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = ::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<T>(conn))
        .await
        .unwrap_or_else(|_| panic!("redis {args:?} timed out"))
        .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
}
