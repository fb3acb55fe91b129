//! The `tollgate` command: parse the arguments, set up logging, and hand over
//! to the library (`run`, `check` or `simulate`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        None => run(&cli.config),
    }
}

fn run(config: &std::path::Path) -> ExitCode {
    let _log = tollgate::log::init();
    let runtime = match runtime_builder().enable_all().build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tollgate::app::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Tokio's multi-thread scheduler, one worker per CPU (or
/// `TOKIO_WORKER_THREADS`); with a single worker, the current-thread
/// scheduler, which does the same work without the hand-offs between a
/// worker and the I/O driver (measured in benches/RESULTS.md).
///
/// Two workers serve about 10 % fewer requests per CPU-second than one on
/// the 2-CPU bench machine, where NGINX's two worker processes lose about
/// 5 % (benches/RESULTS.md, "Issue 12: multi-core"); `event_interval`, the
/// one scheduler knob tried, did not help beyond noise, so Tokio's defaults
/// stay. One current-thread runtime per worker thread, each with its own
/// accept loops and upstream idle connections, measured at parity there;
/// why it is not in yet is written down beside the figures.
fn runtime_builder() -> tokio::runtime::Builder {
    let workers = match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => n.trim().parse().unwrap_or(0),
        Err(_) => std::thread::available_parallelism().map_or(0, usize::from),
    };
    if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
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
