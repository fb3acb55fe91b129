//! The process around the gateway: `tollgate` (start-up, the wiring of each
//! listener to its handler, signals, drain) and `tollgate check`.
//!
//! This is the one place that starts things: the traffic [`Server`] gets the
//! request [`Pipeline`], the admin listener gets the [`admin`] API, and the
//! [`Gateway`] reloads them both. The modules below never start each other.

use std::path::Path;

use crate::admin;
use crate::pipeline::Pipeline;
use crate::reload::{self, Gateway, ReloadError};
use crate::runtime::Runtime;
use crate::server::Server;
use crate::shared::Shared;

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The first configuration could not be put in force.
    #[error(transparent)]
    Start(#[from] ReloadError),
    /// A signal handler could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The async runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Run the gateway until SIGTERM or SIGINT: start from the config at
/// `path`, reload on SIGHUP, then drain.
pub async fn run(path: &Path) -> Result<(), RunError> {
    use tokio::signal::unix::{signal, SignalKind};
    let signals = |kind| signal(kind).map_err(RunError::Signals);
    let mut hup = signals(SignalKind::hangup())?;
    let mut term = signals(SignalKind::terminate())?;
    let mut int = signals(SignalKind::interrupt())?;

    // Start-up is a reload from nothing: everything is bound before
    // anything is served, so a bad config or a taken port changes nothing.
    let prepared = reload::prepare(path, 1, None, &[])?;
    for warning in &prepared.warnings {
        tracing::warn!(%warning, "config warning");
    }
    let config = prepared.runtime.config.clone();
    let admin_listener = match config.admin.listen {
        Some(addr) => {
            Some(reload::bind(&prepared.source, "admin.listen", addr).map_err(ReloadError::from)?)
        }
        None => None,
    };
    let shared = Shared::new(prepared.runtime);
    shared.runtime.load().start_health_checks(None);
    shared.start_telemetry(&shared.runtime.load());
    let server = Server::new(
        shared.clone(),
        Pipeline::new(shared.clone()),
        config.server.max_connections,
    );
    for (addr, listener) in prepared.bound {
        server.serve(addr, listener);
    }
    let gateway = Gateway::new(shared, server, path);
    if let Some(listener) = admin_listener {
        admin::serve(listener, gateway.clone());
    }
    tracing::info!(generation = 1, config = %path.display(), "tollgate started");
    // Lines from now on go through the log writer's thread.
    crate::log::serving();

    loop {
        tokio::select! {
            _ = hup.recv() => gateway.request_reload(),
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    gateway.shutdown().await;
    Ok(())
}

/// `tollgate check`: validate the config at `path` as start-up would (the
/// runtime is built too, without binding or connecting anything) and
/// describe it: a summary line, one `cost: ...` line per cost limit (is
/// its estimate a bound?), one `lease: ...` line per leased limit (its
/// under-admission bound), then one `warning: ...` line per warning.
pub fn check(path: &Path) -> Result<String, RunError> {
    let loaded = crate::config::load(path).map_err(ReloadError::from)?;
    let c = &loaded.config;
    // Consumers only when configured: `, 3 consumer(s) (api_key, jwt)`.
    let consumers = c.consumers.as_ref().map_or(String::new(), |k| {
        let kinds: Vec<&str> = k.kinds().into_iter().map(|k| k.name()).collect();
        format!(", {} consumer(s) ({})", k.list.len(), kinds.join(", "))
    });
    let summary = format!(
        "{}: ok: {} listener(s), {} route(s), {} upstream(s), {} limit(s), store {}{consumers}\n",
        path.display(),
        c.server.listen.len() + c.server.tls.as_ref().map_or(0, |t| t.listen.len()),
        c.routes.len(),
        c.upstreams.len(),
        c.limits.len(),
        c.store.backend.name(),
    );
    let warnings: String = loaded
        .warnings
        .iter()
        .map(|w| format!("warning: {w}\n"))
        .collect();
    // Each cost limit: whether its estimate bounds what it settles to.
    let costs: String = c
        .limits
        .iter()
        .filter_map(|l| Some((&l.name, l.metered.as_ref()?)))
        .map(|(name, cost)| match cost.overspend() {
            None => format!(
                "cost: {name}: the estimate is a true bound: the budget is never overspent (for requests whose whole prompt is in their body)\n"
            ),
            Some(why) => format!("cost: {name}: {why}\n"),
        })
        .collect();
    // Each leased limit: what leasing may cost it.
    let leases: String = c
        .limits
        .iter()
        .filter_map(|l| Some((&l.name, l.distribution?)))
        .map(|(name, d)| {
            let ttl = crate::config::units::format_duration(d.ttl);
            let exact = if c.store.backend.name() == "memory" {
                " (backend: memory: exact, nothing is leased)"
            } else {
                ""
            };
            format!(
                "lease: {name}: leases of up to {n} unit(s) for {ttl}: never over the limit; under-admission at most instances x {n} unit(s), for at most {ttl}{exact}\n",
                n = d.lease
            )
        })
        .collect();
    // Building the runtime sets up (but, never driven, does not connect)
    // the store client, which wants a Tokio runtime around it.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let _entered = tokio.enter();
    Runtime::build(loaded.config, loaded.sha256, 0, None)
        .map_err(|e| ReloadError::build(path, &loaded.source, e))?;
    Ok(summary + &costs + &leases + &warnings)
}
