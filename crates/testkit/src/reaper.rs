//! Ends every process the fixtures start when the test binary ends, however
//! it ends. Drop alone cannot: a static is never dropped (the Redis Cluster
//! the `redis_cluster` tests share), and a binary that aborts or is killed
//! drops nothing.
//!
//! The first fixture to start a process starts a watchdog, a `sh` reading
//! this binary's pipe until end of file, which comes when the binary is gone
//! (the pipe is close-on-exec, so no other process holds it). Every process
//! a fixture starts carries the binary's mark ([`OWNER`]) in its environment,
//! and so do the processes those start; the watchdog kills each process that
//! carries it, found through `/proc/*/environ` (so a pid reused by another
//! process is never hit), then removes the directories it was given.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The environment variable that marks a process as started by this test
/// binary's fixtures.
pub const OWNER: &str = "TOLLGATE_TEST_OWNER";

/// Reads directories, one a line, until end of file; then kills the marked
/// processes (`$1`: `OWNER=mark`) and removes the directories.
const WATCHDOG: &str = r#"
dirs=''
while IFS= read -r dir; do dirs="$dirs$dir
"; done
pids=$(grep -lsxzF "$1" /proc/[0-9]*/environ | cut -d/ -f3)
[ -z "$pids" ] || kill -9 $pids 2>/dev/null
printf '%s' "$dirs" | while IFS= read -r dir; do rm -rf -- "$dir"; done
"#;

struct Watchdog {
    /// `OWNER`'s value in this binary's processes.
    mark: String,
    /// The watchdog, never waited for: it ends after this binary, when its
    /// standard input, which only this binary holds, closes.
    child: Mutex<Child>,
}

fn watchdog() -> &'static Watchdog {
    static STARTED: OnceLock<Watchdog> = OnceLock::new();
    STARTED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mark = format!("{}-{nanos}", std::process::id());
        let child = Command::new("sh")
            .args(["-c", WATCHDOG, "watchdog", &format!("{OWNER}={mark}")])
            .env_remove(OWNER)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the fixtures' watchdog (sh)");
        Watchdog {
            mark,
            child: Mutex::new(child),
        }
    })
}

/// `Command::new(program)`, its process (and what that starts) marked as
/// this binary's: killed when the binary ends, if nothing ended it before.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env(OWNER, &watchdog().mark);
    cmd
}

/// Removes `dir` when the binary ends, after its processes are killed (a
/// fixture that is never dropped leaves its directory too).
pub fn remove_at_exit(dir: &Path) {
    let mut child = watchdog().child.lock().unwrap_or_else(|e| e.into_inner());
    let pipe = child.stdin.as_mut().expect("the watchdog's stdin");
    // A watchdog that died early cannot be helped here; the tests/run
    // check reports what it then leaves.
    let _ = writeln!(pipe, "{}", dir.display());
}
