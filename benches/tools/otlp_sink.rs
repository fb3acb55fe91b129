//! The OTLP collector of benches/e2e/run's telemetry rows (`--only otel`,
//! and the `tg-otel-*` rows of the full run): the receiver of the telemetry
//! tests (tests/common/otlp.rs: OTLP/HTTP `POST /v1/traces` and OTLP/gRPC on
//! one port, each batch decoded with the `opentelemetry-proto` types), in
//! its counting mode: it keeps no span, only the number of spans and of
//! export requests, so its memory stays flat however many spans a run sends.
//!
//! ```text
//! otlp_sink LISTEN    e.g. 127.0.0.1:4318
//! ```
//!
//! Every export is answered at once (success); any other request gets 404
//! (the bench polls `GET /` for that to know it is up). It runs until
//! SIGTERM or SIGINT, then prints one line to stdout, `spans N batches M`
//! (everything received since it started), and exits 0. Tokio's
//! current-thread scheduler: the bench pins it to the load CPU, beside wrk
//! and the upstream, as it does Redis.

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::signal::unix::{signal, SignalKind};

// The test fixture as it is; the parts the tests use and this does not
// (the kept spans, the delay) are dead code here.
#[allow(dead_code)]
#[path = "../../tests/common/otlp.rs"]
mod otlp;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen] = args.as_slice() else {
        eprintln!("usage: otlp_sink LISTEN    (e.g. 127.0.0.1:4318)");
        std::process::exit(2);
    };
    let addr: SocketAddr = listen
        .parse()
        .context("LISTEN: an address such as 127.0.0.1:4318")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // The handlers first: a SIGTERM that comes once the port answers
        // is always counted out, never the default (death, no line).
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let collector = otlp::Collector::start_counting(addr)
            .await
            .with_context(|| format!("bind {addr}"))?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        println!(
            "spans {} batches {}",
            collector.count(),
            collector.batches()
        );
        Ok(())
    })
}
