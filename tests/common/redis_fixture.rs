//! A real `redis-server` on a free port, for the Redis store tests, and a
//! few inspection helpers (SCAN, PTTL, INFO commandstats) over the `redis`
//! crate.
//!
//! A minimal stand-in for `tests/common/redis.rs` (branch `redis`), with the
//! same names: `RedisServer::start()`, `url()`, `kill()`, `stop()` (SIGSTOP),
//! `cont()`, `restart()` (same port). To be deduplicated once both land.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::free_port;
use super::gateway::temp_dir;

/// How long `redis-server` may take to answer PING after a (re)start.
pub const REDIS_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Every inspection call must finish within this.
pub const REDIS_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// A running `redis-server` (no persistence), killed on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl RedisServer {
    /// Starts `redis-server` on a free port and waits for PING.
    pub async fn start() -> RedisServer {
        let server = RedisServer {
            port: free_port(),
            dir: temp_dir("redis"),
            child: Mutex::new(None),
        };
        server.spawn();
        server.wait_ready().await;
        server
    }

    fn spawn(&self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
                "--dir",
            ])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (apt-get install -y redis-server)");
        *self.child.lock().unwrap() = Some(child);
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + REDIS_READY_TIMEOUT;
        loop {
            if ping(self.port).await {
                return;
            }
            if Instant::now() > deadline {
                panic!("redis-server on port {} not ready", self.port);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/0`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(Child::id)
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-s", sig, &pid.to_string()])
                .status();
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process is frozen, its sockets stay open.
    pub fn stop(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn cont(&self) {
        self.signal("CONT");
    }

    /// Kills the server (if running) and starts a fresh one on the same port
    /// (empty: no persistence), waiting for PING.
    pub async fn restart(&self) {
        self.kill();
        self.spawn();
        self.wait_ready().await;
    }

    /// A fresh multiplexed connection for inspection.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url()).expect("redis url");
        tokio::time::timeout(
            REDIS_CALL_TIMEOUT,
            client.get_multiplexed_async_connection(),
        )
        .await
        .expect("redis connect timed out")
        .expect("redis connect")
    }

    /// Runs one command (3 s deadline).
    pub async fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut conn = self.conn().await;
        run(&mut conn, args).await
    }

    /// Every key (SCAN).
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

    /// `INFO commandstats`, as command name -> (calls, failed_calls).
    pub async fn command_stats(&self) -> BTreeMap<String, CommandStat> {
        let text: String = self.cmd(&["INFO", "commandstats"]).await;
        parse_command_stats(&text)
    }
}

/// One `cmdstat_*` line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStat {
    pub calls: u64,
    pub failed_calls: u64,
    pub rejected_calls: u64,
}

/// Parses `cmdstat_evalsha:calls=3,usec=...,rejected_calls=0,failed_calls=0`.
pub fn parse_command_stats(text: &str) -> BTreeMap<String, CommandStat> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut stat = CommandStat::default();
        for kv in fields.split(',') {
            if let Some((k, v)) = kv.split_once('=') {
                let v: u64 = v.parse().unwrap_or(0);
                match k {
                    "calls" => stat.calls = v,
                    "failed_calls" => stat.failed_calls = v,
                    "rejected_calls" => stat.rejected_calls = v,
                    _ => {}
                }
            }
        }
        out.insert(name.to_string(), stat);
    }
    out
}

/// Runs one command on `conn` with the call deadline.
pub async fn run<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    tokio::time::timeout(REDIS_CALL_TIMEOUT, cmd.query_async::<T>(conn))
        .await
        .unwrap_or_else(|_| panic!("redis {args:?} timed out"))
        .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
}

/// Whether a Redis on `port` answers PING within 500 ms.
pub async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        buf[..n].starts_with(b"+PONG").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(()))
    )
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.cont();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
