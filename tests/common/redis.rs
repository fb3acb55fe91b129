//! A real `redis-server` on a free port, for the Redis store's tests: no
//! mocks. It keeps nothing on disk (`--save "" --appendonly no`, a temp
//! dir), can be killed, restarted on the same port, and paused with
//! SIGSTOP to play a server that accepts connections but never answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// One `redis-server` process, killed when dropped.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create the redis temp dir");
            let mut server = RedisServer {
                port,
                dir,
                child: None,
            };
            // Another process may take the port between free_port and the
            // bind: try another one.
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (install it: apt-get install redis-server)");
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A blocking client of this server.
    pub fn client(&self) -> ::redis::Client {
        ::redis::Client::open(self.url()).expect("a valid url")
    }

    /// A blocking connection to this server.
    pub fn connection(&self) -> ::redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to the test redis")
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL ends a stopped process too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Pauses the server (SIGSTOP): connections open, nothing answered.
    pub fn stop(&self) {
        self.signal("STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn cont(&self) {
        self.signal("CONT");
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub fn restart(&mut self) {
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

    /// Spawns the process and waits for PING; false if it exited (the port
    /// was taken).
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (install it: apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    fn ping(&self) -> bool {
        self.client()
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut c| ::redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("redis-server is running").id();
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {pid} failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
