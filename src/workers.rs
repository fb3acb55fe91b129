//! The worker threads that serve connections: one current-thread Tokio
//! runtime each (`src/main.rs`, thread-per-core). Registered once at start;
//! the server runs an accept loop per thread on each listener
//! ([`crate::server`]) and the Redis store keeps a lane per thread
//! ([`crate::limit`]). A module of its own so both can ask without one
//! using the other.

use std::sync::OnceLock;

use tokio::runtime::Handle;

/// The runtimes of the worker threads, the first being the main thread's.
static THREADS: OnceLock<Vec<Handle>> = OnceLock::new();

/// Register the worker threads' runtimes: once, before the first listener
/// is served. A second call changes nothing.
pub fn set(handles: Vec<Handle>) {
    let _ = THREADS.set(handles);
}

/// The worker threads' runtimes; `None` when none were registered (the
/// runtime that serves a listener is then the one that calls it).
pub fn handles() -> Option<&'static [Handle]> {
    THREADS.get().map(Vec::as_slice)
}

/// How many worker threads serve connections: 1 when none were registered.
pub fn count() -> usize {
    handles().map_or(1, <[Handle]>::len).max(1)
}
