//! Start-up and reload, one code path: read and validate the file, build the
//! new [`Runtime`] off the request path, bind the listen addresses that are
//! new, then swap the runtime in atomically and retire the addresses that
//! went away. Anything failing before the swap changes nothing.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::admin;
use crate::config;
use crate::runtime::Runtime;
use crate::server::{self, Server};
use crate::shared::Shared;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config (or the runtime built from it) is invalid.
    #[error("{0}")]
    Config(String),
    /// A listen address could not be bound.
    #[error("{0}")]
    Bind(String),
}

/// A running gateway: its shared state, its listeners, and how to reload it.
pub struct Gateway {
    /// State shared with every connection.
    pub shared: Arc<Shared>,
    /// The traffic listeners.
    pub server: Arc<Server>,
    /// The admin listener's bound address, if enabled.
    pub admin_addr: Option<SocketAddr>,
    path: PathBuf,
    /// One reload at a time.
    reload_lock: tokio::sync::Mutex<()>,
    /// Pending SIGHUPs: a burst collapses into one more reload.
    pending: Notify,
}

/// A new generation, built and bound, not yet in force.
struct Prepared {
    runtime: Runtime,
    bound: Vec<(SocketAddr, TcpListener)>,
    removed: Vec<SocketAddr>,
    warnings: Vec<String>,
}

/// Parse `path`, build generation `generation` and bind every address of it
/// that is not in `serving`.
fn prepare(
    path: &Path,
    generation: u64,
    current: Option<&Runtime>,
    serving: &[SocketAddr],
) -> Result<Prepared, StartError> {
    let loaded = config::load(path).map_err(|e| StartError::Config(e.to_string()))?;
    let runtime = Runtime::build(loaded.config, loaded.sha256, generation, current)
        .map_err(|e| StartError::Config(format!("{}: {e}", path.display())))?;
    let wanted: HashSet<SocketAddr> = runtime.config.server.listen.iter().copied().collect();
    let mut bound = Vec::new();
    for &addr in &runtime.config.server.listen {
        if serving.contains(&addr) || bound.iter().any(|(a, _)| *a == addr) {
            continue;
        }
        let listener = server::bind(addr)
            .map_err(|e| StartError::Bind(format!("server.listen: cannot bind {addr}: {e}")))?;
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
    })
}

impl Gateway {
    /// Load the config at `path`, bind its listeners and the admin listener,
    /// and start serving.
    pub async fn start(path: &Path) -> Result<Arc<Gateway>, StartError> {
        let prepared = prepare(path, 1, None, &[])?;
        for warning in &prepared.warnings {
            tracing::warn!(%warning, "config warning");
        }
        let max_connections = prepared.runtime.config.server.max_connections;
        let admin_config = prepared.runtime.config.admin.clone();
        let admin_listener =
            match admin_config.listen {
                Some(addr) => Some(server::bind(addr).map_err(|e| {
                    StartError::Bind(format!("admin.listen: cannot bind {addr}: {e}"))
                })?),
                None => None,
            };
        let shared = Shared::new(prepared.runtime);
        let server = Server::new(shared.clone(), max_connections);
        for (addr, listener) in prepared.bound {
            server.serve(addr, listener);
        }
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        let gateway = Arc::new(Gateway {
            shared,
            server,
            admin_addr,
            path: path.to_path_buf(),
            reload_lock: tokio::sync::Mutex::new(()),
            pending: Notify::new(),
        });
        if let Some(listener) = admin_listener {
            admin::serve(listener, gateway.clone());
        }
        let worker = gateway.clone();
        tokio::spawn(async move {
            loop {
                worker.pending.notified().await;
                let _ = worker.reload().await;
            }
        });
        tracing::info!(generation = 1, config = %path.display(), "tollgate started");
        Ok(gateway)
    }

    /// Ask for a reload without waiting for it (SIGHUP). Requests made while
    /// a reload runs collapse into one more reload after it.
    pub fn request_reload(&self) {
        self.pending.notify_one();
    }

    /// Reload now: the new generation on success, the error otherwise (the
    /// old config keeps serving).
    pub async fn reload(&self) -> Result<u64, String> {
        let _guard = self.reload_lock.lock().await;
        let current = self.shared.runtime.load_full();
        let generation = current.generation + 1;
        let serving = self.server.addresses();
        match prepare(&self.path, generation, Some(&current), &serving) {
            Ok(prepared) => {
                for warning in &prepared.warnings {
                    tracing::warn!(%warning, "config warning");
                }
                let max_connections = prepared.runtime.config.server.max_connections;
                if prepared.runtime.config.admin.listen != current.config.admin.listen {
                    tracing::warn!("admin.listen changed: it takes effect at the next restart");
                }
                // Cached rejections came from the old limits: a raised
                // quota must take effect at once.
                prepared.runtime.limiter.clear_deny_cache();
                self.shared.runtime.store(Arc::new(prepared.runtime));
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
                tracing::info!(generation, "config reloaded");
                Ok(generation)
            }
            Err(error) => {
                let message = error.to_string();
                self.shared.set_last_error(Some(message.clone()));
                self.shared.metrics.reload(false);
                tracing::error!(error = %message, "config reload failed; the previous config stays in force");
                Err(message)
            }
        }
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
    }
}

/// Run the gateway until SIGTERM or SIGINT: start, reload on SIGHUP, drain.
pub async fn run(path: &Path) -> Result<(), StartError> {
    use tokio::signal::unix::{signal, SignalKind};
    let signals = |kind| signal(kind).map_err(|e| StartError::Bind(format!("signal handler: {e}")));
    let mut hup = signals(SignalKind::hangup())?;
    let mut term = signals(SignalKind::terminate())?;
    let mut int = signals(SignalKind::interrupt())?;
    let gateway = Gateway::start(path).await?;
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
