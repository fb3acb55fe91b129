//! Start-up and reload, one code path: read and validate the file, build the
//! new [`Runtime`] off the request path, bind the listen addresses that are
//! new, then swap the runtime in atomically and retire the addresses that
//! went away. Anything failing before the swap changes nothing.
//!
//! [`prepare`] is the shared first half (start-up calls it for generation 1,
//! from `app.rs`); [`Gateway::reload`] is the second half for every
//! later generation.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::config::{self, ConfigError, Location, Source};
use crate::runtime::{BuildError, Runtime};
use crate::server::{self, Server};
use crate::shared::Shared;

/// Why a configuration could not be put in force (at start-up or reload).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The runtime could not be built from a valid file.
    #[error("{file}: {source}")]
    Build {
        /// The config file.
        file: String,
        /// What failed.
        #[source]
        source: BuildError,
    },
    /// The runtime could not be built because of a file a config field
    /// names (a certificate, a key, a CA, a JWKS): where the field is, and
    /// what is wrong with the file.
    #[error("{at}: {problem}")]
    File {
        /// The field's file, line and column.
        at: Box<Location>,
        /// The file and what is wrong with it.
        problem: String,
    },
    /// A listen address could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
}

/// How long shutdown waits, after the connections, for cost settlements
/// still on their way to the store (docs/configuration/cost.md).
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl ReloadError {
    /// A runtime build error, positioned at the config field it is about
    /// when it is about one (`source` is the config's text).
    pub fn build(file: &Path, source: &Source, error: BuildError) -> ReloadError {
        match error.about_field() {
            Some((field, problem)) => ReloadError::File {
                at: Box::new(source.locate(field)),
                problem,
            },
            None => ReloadError::Build {
                file: file.display().to_string(),
                source: error,
            },
        }
    }
}

/// A listen address that could not be bound, with where the config sets it.
#[derive(Debug, thiserror::Error)]
#[error("{at}: cannot bind {addr}: {source}{}", hint(&at.variables))]
pub struct BindError {
    /// The field that names the address (`server.listen[0]`, `admin.listen`).
    pub at: Box<Location>,
    /// The address.
    pub addr: SocketAddr,
    /// Why (in use, not an address of this host, ...).
    #[source]
    pub source: io::Error,
}

/// " (set VAR to another address)" when the config reads the address from
/// environment variables, as the default config does.
fn hint(variables: &[String]) -> String {
    match variables {
        [] => String::new(),
        [one] => format!(" (the address comes from ${{{one}}}: set {one} to another address)"),
        many => format!(
            " (the address comes from {}: set one of them to another address)",
            many.iter()
                .map(|v| format!("${{{v}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Bind `addr`, set by the config field `field`.
pub fn bind(source: &Source, field: &str, addr: SocketAddr) -> Result<TcpListener, BindError> {
    server::bind(addr).map_err(|e| BindError {
        at: Box::new(source.locate(field)),
        addr,
        source: e,
    })
}

/// A new generation, built and bound, not yet in force.
pub struct Prepared {
    /// The runtime.
    pub runtime: Runtime,
    /// Listeners bound for addresses not served yet, by configured address.
    pub bound: Vec<(SocketAddr, TcpListener)>,
    /// Served addresses the new config no longer has.
    pub removed: Vec<SocketAddr>,
    /// The config's warnings.
    pub warnings: Vec<String>,
    /// The config text, to point at its fields in later errors.
    pub source: Source,
}

/// Parse `path`, build generation `generation` (reusing what `current`
/// allows) and bind every address of it that is not in `serving`.
pub fn prepare(
    path: &Path,
    generation: u64,
    current: Option<&Runtime>,
    serving: &[SocketAddr],
) -> Result<Prepared, ReloadError> {
    let loaded = config::load(path)?;
    let source = loaded.source;
    let runtime = Runtime::build(loaded.config, loaded.sha256, generation, current)
        .map_err(|e| ReloadError::build(path, &source, e))?;
    // Plain and TLS listeners alike: which one an address is, is read from
    // the runtime per connection (`Runtime::tls_for`).
    let server = &runtime.config.server;
    let plain = server
        .listen
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("server.listen[{i}]"), *a));
    let tls = server.tls.iter().flat_map(|t| t.listen.iter().enumerate());
    let addresses: Vec<(String, SocketAddr)> = plain
        .chain(tls.map(|(i, a)| (format!("server.tls.listen[{i}]"), *a)))
        .collect();
    let wanted: HashSet<SocketAddr> = addresses.iter().map(|(_, a)| *a).collect();
    let mut bound = Vec::new();
    for (field, addr) in addresses {
        if serving.contains(&addr) || bound.iter().any(|(a, _)| *a == addr) {
            continue;
        }
        let listener = bind(&source, &field, addr)?;
        bound.push((addr, listener));
    }
    let removed = serving
        .iter()
        .copied()
        .filter(|a| !wanted.contains(a))
        .collect();
    Ok(Prepared {
        runtime,
        bound,
        removed,
        warnings: loaded.warnings,
        source,
    })
}

/// A running gateway's reloader: its shared state, its traffic listeners,
/// and the file it reloads.
pub struct Gateway {
    /// State shared with every connection.
    pub shared: Arc<Shared>,
    /// The traffic listeners.
    pub server: Arc<Server>,
    path: PathBuf,
    /// One reload at a time.
    reload_lock: tokio::sync::Mutex<()>,
    /// Pending SIGHUPs: a burst collapses into one more reload.
    pending: Notify,
}

impl Gateway {
    /// The reloader of a gateway started from the config at `path`,
    /// serving through `server`; requests for a reload (SIGHUP) are run one
    /// after the other by a task of its own.
    pub fn new(shared: Arc<Shared>, server: Arc<Server>, path: &Path) -> Arc<Gateway> {
        let gateway = Arc::new(Gateway {
            shared,
            server,
            path: path.to_path_buf(),
            reload_lock: tokio::sync::Mutex::new(()),
            pending: Notify::new(),
        });
        let worker = gateway.clone();
        tokio::spawn(async move {
            loop {
                worker.pending.notified().await;
                let _ = worker.reload().await;
            }
        });
        gateway
    }

    /// Ask for a reload without waiting for it (SIGHUP). Requests made while
    /// a reload runs collapse into one more reload after it.
    pub fn request_reload(&self) {
        self.pending.notify_one();
    }

    /// Reload now: the new generation on success, the error otherwise (the
    /// old config keeps serving; the error is kept for `GET /config`).
    pub async fn reload(&self) -> Result<u64, ReloadError> {
        let _guard = self.reload_lock.lock().await;
        let current = self.shared.runtime.load_full();
        let generation = current.generation + 1;
        let serving = self.server.addresses();
        let prepared = match prepare(&self.path, generation, Some(&current), &serving) {
            Ok(prepared) => prepared,
            Err(error) => {
                self.shared.set_last_error(Some(error.to_string()));
                self.shared.metrics.reload(false);
                tracing::error!(%error, "config reload failed; the previous config stays in force");
                return Err(error);
            }
        };
        for warning in &prepared.warnings {
            tracing::warn!(%warning, "config warning");
        }
        let max_connections = prepared.runtime.config.server.max_connections;
        if prepared.runtime.config.admin.listen != current.config.admin.listen {
            tracing::warn!("admin.listen changed: it takes effect at the next restart");
        }
        // Cached rejections came from the old limits: a raised quota must
        // take effect at once.
        prepared.runtime.limiter.clear_deny_cache();
        let runtime = Arc::new(prepared.runtime);
        self.shared.observe_leases(&runtime.limiter);
        self.shared.runtime.store(runtime.clone());
        runtime.start_health_checks(Some(&current));
        self.shared.start_telemetry(&runtime);
        for (addr, listener) in prepared.bound {
            self.server.serve(addr, listener);
        }
        for addr in prepared.removed {
            self.server.stop(addr);
        }
        self.server.set_max_connections(max_connections);
        self.shared.set_last_error(None);
        self.shared.metrics.reload(true);
        self.shared.metrics.generation.set(generation as i64);
        // Leases end at a reload: what they did not spend goes back (a
        // changed limit must not spend units taken under its old terms).
        let returned = current.limiter.return_leases().await;
        tracing::info!(generation, leases_returned = returned, "config reloaded");
        Ok(generation)
    }

    /// Drain: `/readyz` answers 503, listeners close, connections finish
    /// their requests for up to `server.shutdown_grace`.
    pub async fn shutdown(&self) {
        self.shared
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let grace = self.shared.runtime.load().config.server.shutdown_grace;
        tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
        if self.server.shutdown(grace).await {
            tracing::info!("all connections finished");
        } else {
            tracing::warn!("shutdown grace elapsed with connections still open");
        }
        // The settlements of the last requests (those the grace cut off
        // among them) reach the store before the process ends.
        if !self.shared.finish_settling(SETTLE_WAIT).await {
            tracing::warn!("cost settlements still unsent at exit: their estimates stay charged");
        }
        // What leases did not spend goes back to the store (within its
        // timeout); a SIGKILL strands it until the window or bucket moves on.
        let returned = self.shared.runtime.load().limiter.return_leases().await;
        if returned > 0 {
            tracing::info!(leases = returned, "leases given back");
        }
        // The last requests' spans go out before the process ends (within
        // one export's timeout).
        if let Some(telemetry) = &self.shared.runtime.load().telemetry {
            telemetry.flush(crate::trace::export::EXPORT_TIMEOUT).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_names_the_field_its_line_and_the_variable() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let text = format!(
            "server:\n  listen: [\"${{TOLLGATE_LISTEN:-{addr}}}\"]\nadmin:\n  listen: \"\"\n"
        );
        let loaded = config::parse(&text, "gateway.yaml").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let error = bind(&loaded.source, "server.listen[0]", addr).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "gateway.yaml:2:12: server.listen[0]: cannot bind {addr}: "
            )),
            "{message}"
        );
        assert!(
            message.ends_with(
                " (the address comes from ${TOLLGATE_LISTEN}: set TOLLGATE_LISTEN to another address)"
            ),
            "{message}"
        );
        assert_eq!(error.source.kind(), io::ErrorKind::AddrInUse);
    }
}
