//! Test fixtures shared by tollgate's crates (a dev-dependency only): real
//! `redis-server` processes on free ports, killed and their directories
//! removed when dropped, and the [`reaper`] that ends every process a
//! fixture started when the test binary ends, however it ends. No mocks:
//! the tests talk to the real thing.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod reaper;
pub mod redis;

pub use redis::{free_port, RedisServer};

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
    reaper::remove_at_exit(&dir);
    dir
}
