//! The `tollgate` command: parse the arguments, set up logging, and hand over
//! to the library (`run`, `check` or `simulate`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The allocator: jemalloc. Its size classes keep a long-running gateway's
/// heap from fragmenting, and it returns freed pages to the kernel about a
/// second after they are freed ([`JEMALLOC_CONF`]), so RSS follows the
/// memory in use rather than the peak of every burst (`benches/soak/run`,
/// an hour of mixed traffic on Redis: with glibc's malloc RSS grew 14.6 %
/// after the warm-up, 4.4 MiB an hour; with jemalloc, -0.07 %).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its start (its `malloc_conf` global,
/// named with the `_rjem_` prefix tikv-jemalloc-sys gives its symbols).
/// `background_thread:false`: freed pages are purged by [`purging`]'s
/// choice, a jemalloc thread with several workers, the first worker itself
/// with one. `dirty_decay_ms: 1000`: freed pages are
/// returned after about a second instead of ten, so the tables a growing
/// map leaves behind do not add to the peak (a million clients: 151-162
/// MiB instead of 190-200 MiB, `tests/memory_bound.rs`).
/// `tcache_nslots_small_min: 128` and `tcache_gc_incr_bytes: 1048576`: each
/// thread's cache keeps up to 128 freed blocks of every small size (20 by
/// default for the sizes of a few KB, such as a request's future, where a
/// gateway has a request in flight per connection), and trims them every
/// MiB allocated rather than every 64 KiB: a proxied request went 700
/// instructions faster (callgrind, 64 requests in flight), its blocks no
/// longer refilled from and flushed to the arena in batches. The environment
/// variable `_RJEM_MALLOC_CONF` still overrides them all (docs/operations.md,
/// "Memory").
#[cfg(all(unix, not(target_env = "musl")))]
#[export_name = "_rjem_malloc_conf"]
static JEMALLOC_CONF: &[u8; 101] =
    b"background_thread:false,dirty_decay_ms:1000,tcache_nslots_small_min:128,tcache_gc_incr_bytes:1048576\0";

/// Who gives freed pages back to the kernel, also while the gateway is idle
/// (without anyone doing it, jemalloc purges only inside allocation calls,
/// and a million memory-store entries freed by the sweeper of an idle
/// gateway stayed resident: 150 MiB instead of 52, `tests/memory_bound.rs`).
#[cfg(all(unix, not(target_env = "musl")))]
mod purging {
    use std::ffi::{c_void, CStr};
    use std::ptr::null_mut;
    use std::time::Duration;

    /// Several workers: jemalloc's background thread purges, off the
    /// workers. One worker: that worker purges once a second
    /// ([`decay_every_second`]); its process then has no other thread (the
    /// log writer's starts with the first line logged while serving), so
    /// the C library and the kernel take their single-threaded shortcuts
    /// on every socket call, and no purging thread is scheduled between its
    /// requests (a proxied request: 167 instructions fewer, about 1 % more
    /// requests a second in paired runs). An operator's `background_thread`
    /// in `_RJEM_MALLOC_CONF` is left as set.
    /// Returns whether the caller's worker is to purge.
    pub fn choose(workers: usize) -> bool {
        let set_by_operator =
            std::env::var("_RJEM_MALLOC_CONF").is_ok_and(|conf| sets_background_thread(&conf));
        if set_by_operator {
            return !background_thread();
        }
        !(workers > 1 && start_background_thread())
    }

    /// Whether jemalloc options (`key:value,...`) set `background_thread`
    /// (not merely `max_background_threads`).
    fn sets_background_thread(conf: &str) -> bool {
        conf.split(',')
            .any(|option| option.split(':').next().map(str::trim) == Some("background_thread"))
    }

    /// Purge, every second, the freed pages whose decay time has passed.
    pub async fn decay_every_second() {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            // All arenas (`MALLCTL_ARENAS_ALL`).
            // SAFETY: `arena.4096.decay` reads and writes nothing: every
            // pointer null, every length 0, as its documentation asks.
            unsafe {
                tikv_jemalloc_sys::mallctl(
                    c"arena.4096.decay".as_ptr(),
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    0,
                );
            }
        }
    }

    /// Whether jemalloc's background thread is on.
    fn background_thread() -> bool {
        let mut on = false;
        let mut len = std::mem::size_of::<bool>();
        // SAFETY: `background_thread` is a `bool`; `on` and `len` describe
        // a `bool` to write it into.
        let read = unsafe {
            tikv_jemalloc_sys::mallctl(
                NAME.as_ptr(),
                (&mut on as *mut bool).cast::<c_void>(),
                &mut len,
                null_mut(),
                0,
            )
        };
        read == 0 && on
    }

    /// Turn jemalloc's background thread on; whether it took.
    fn start_background_thread() -> bool {
        let mut on = true;
        // SAFETY: `background_thread` is a `bool`; the new value's pointer
        // and length describe `on`.
        let written = unsafe {
            tikv_jemalloc_sys::mallctl(
                NAME.as_ptr(),
                null_mut(),
                null_mut(),
                (&mut on as *mut bool).cast::<c_void>(),
                std::mem::size_of::<bool>(),
            )
        };
        written == 0
    }

    const NAME: &CStr = c"background_thread";

    #[cfg(test)]
    mod tests {
        use super::sets_background_thread;

        #[test]
        fn only_the_background_thread_option_counts_as_set() {
            assert!(sets_background_thread("background_thread:true"));
            assert!(sets_background_thread("narenas:2, background_thread:false"));
            assert!(!sets_background_thread("max_background_threads:4"));
            assert!(!sets_background_thread("dirty_decay_ms:10000"));
            assert!(!sets_background_thread(""));
        }
    }
}

/// A reverse proxy and API gateway that protects HTTP backends with throttling.
#[derive(Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    /// The config file.
    #[arg(
        short = 'c',
        long = "config",
        env = "TOLLGATE_CONFIG",
        default_value = "./gateway.yaml",
        global = true
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and validate the config, print a summary and warnings; exit 0 if valid, 1 if not.
    Check,
    /// Replay a request log through the configured routes and limits on a
    /// virtual clock and report what would have been throttled.
    Simulate {
        /// The log: JSON lines (`ts`, `client`, `method`, `path`, optional
        /// `host` and `headers`) or the gateway's access log; `-` reads
        /// standard input.
        log: PathBuf,
        /// Print the report as one JSON document.
        #[arg(long, conflicts_with = "decisions")]
        json: bool,
        /// Instead of the report, print one JSON line per request: what the
        /// gateway would answer it (route, status, error, limit).
        #[arg(long)]
        decisions: bool,
    },
    /// Read an API key on standard input and print its `sha256:<hex>`
    /// digest, the form `consumers` keys are configured in. One trailing
    /// newline (as `echo` adds) is not part of the key.
    HashKey,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check) => check(&cli.config),
        Some(Command::Simulate {
            log,
            json,
            decisions,
        }) => {
            let output = match (json, decisions) {
                (_, true) => tollgate::simulate::Output::Decisions,
                (true, false) => tollgate::simulate::Output::Json,
                (false, false) => tollgate::simulate::Output::Text,
            };
            simulate(&cli.config, &log, output)
        }
        Some(Command::HashKey) => hash_key(),
        None => run(&cli.config),
    }
}

/// `tollgate hash-key`: the digest of the key on standard input.
fn hash_key() -> ExitCode {
    use std::io::Read;
    let mut key = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut key) {
        eprintln!("tollgate hash-key: cannot read standard input: {e}");
        return ExitCode::FAILURE;
    }
    if key.ends_with(b"\n") {
        key.pop();
        if key.ends_with(b"\r") {
            key.pop();
        }
    }
    if key.is_empty() {
        eprintln!("tollgate hash-key: no key on standard input");
        return ExitCode::FAILURE;
    }
    println!("{}", tollgate::auth::consumers::digest_text(&key));
    ExitCode::SUCCESS
}

fn run(config: &std::path::Path) -> ExitCode {
    let _log = tollgate::log::init();
    let workers = match workers() {
        Ok(n) => n,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let build = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let runtime = match build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut threads = vec![runtime.handle().clone()];
    for i in 1..workers {
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("tollgate-worker-{i}"))
            .spawn(move || match build() {
                Ok(rt) => {
                    tollgate::proxy::deadline::keep_timers_on_this_thread();
                    let _ = tx.send(Ok(rt.handle().clone()));
                    // Serves what the accept loops spawn here, for the
                    // process's life (it ends when `main` returns).
                    rt.block_on(std::future::pending::<()>());
                }
                Err(error) => {
                    let _ = tx.send(Err(error));
                }
            });
        match spawned.map(|_| rx.recv()) {
            Ok(Ok(Ok(handle))) => threads.push(handle),
            Ok(Ok(Err(error))) | Err(error) => {
                eprintln!("error: cannot start worker thread {i}: {error}");
                return ExitCode::FAILURE;
            }
            Ok(Err(_)) => {
                eprintln!("error: cannot start worker thread {i}");
                return ExitCode::FAILURE;
            }
        }
    }
    tollgate::server::set_threads(threads);
    // This thread's runtime, like each worker's, serves until the end.
    tollgate::proxy::deadline::keep_timers_on_this_thread();
    #[cfg(all(unix, not(target_env = "musl")))]
    if purging::choose(workers) {
        runtime.spawn(purging::decay_every_second());
    }
    match runtime.block_on(tollgate::app::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The worker threads: one per CPU, or `TOKIO_WORKER_THREADS`. Each runs a
/// current-thread Tokio runtime and its own accept loop per listener
/// ([`tollgate::server::set_threads`]), and keeps its own idle upstream
/// connections, so a connection and its upstream exchanges stay on one
/// thread, with no work stealing or hand-offs between threads. The first
/// (this thread) also runs the admin API, signals, reloads and health
/// checks.
///
/// Measured on 2 CPUs (`benches/e2e/run --only cores`): Tokio's
/// multi-thread scheduler with 2 workers served about 10 % fewer requests
/// per CPU-second than 1 worker; this design serves 0.91-1.20 of 1
/// worker's at 64 and 256 connections, and 0.97-0.98 in a later run
/// (NGINX's 2 worker processes in the same runs: 0.88-0.97, 0.98-1.14).
///
/// A `TOKIO_WORKER_THREADS` that is not a whole number from 1 to 1024 is an
/// error, not a silent default.
fn workers() -> Result<usize, String> {
    match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => match n.trim().parse::<usize>() {
            Ok(n @ 1..=1024) => Ok(n),
            _ => Err(format!(
                "TOKIO_WORKER_THREADS must be a whole number from 1 to 1024, got {n:?}"
            )),
        },
        Err(_) => Ok(std::thread::available_parallelism().map_or(1, usize::from)),
    }
}

fn check(config: &std::path::Path) -> ExitCode {
    match tollgate::app::check(config) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn simulate(
    config: &std::path::Path,
    log: &std::path::Path,
    output: tollgate::simulate::Output,
) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    match tollgate::simulate::run(config, log, output, &mut out, &mut err) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            use std::io::Write as _;
            let _ = writeln!(err, "error: {error}");
            ExitCode::FAILURE
        }
    }
}
