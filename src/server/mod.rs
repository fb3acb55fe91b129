//! Listeners and connections: binding, the accept loop, the connection limit,
//! the header-read and idle timeouts, and graceful shutdown.
//!
//! Each listen address has its own accept loop, stopped by its own token so a
//! reload can remove one address without touching the others. Connections
//! are tracked in one [`TaskTracker`] so shutdown can wait for them; what a
//! handler leaves to run after an upgrade ([`ConnInfo::after_upgrade`], a
//! tunnel) runs on its connection's task, so it is tracked, counted and
//! closed at the end of the grace like the connection it is.
//!
//! With several worker threads (`src/main.rs`: one current-thread Tokio
//! runtime each), every thread runs its own accept loop on a copy of each
//! listener's descriptor ([`set_threads`]): a connection lives on the thread
//! that accepted it, with no hand-off between threads; the stop token, the
//! connection limit and the tracker are shared, so reload and shutdown see
//! one server.
//!
//! The server knows nothing of what a request means: each one goes to the
//! [`Handler`] it was built with (the gateway's pipeline; the binary wires
//! them together in `app.rs`). Nor does it know the gateway's config: it
//! reads each connection's timeouts and TLS config through [`Settings`],
//! which the gateway implements.

mod conn;
mod settings;
pub mod sniff;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::mtls::PeerCert;
use crate::body::Body;
use crate::client_addr::{canonical_ip, ip_value};
pub use settings::{ConnSettings, Settings, Timeouts};
use sniff::Framing;

/// What a connection knows of itself, handed to the handler with each of
/// its requests.
pub struct ConnInfo {
    /// The TCP peer.
    pub peer: SocketAddr,
    /// `http` or `https`, for `X-Forwarded-Proto`.
    pub proto: &'static str,
    /// The names of the client certificate rustls verified in the TLS
    /// handshake, read once for all the connection's requests; `None` over
    /// plain HTTP, over TLS without a certificate, and for a certificate
    /// whose names could not be read.
    pub client_cert: Option<Arc<PeerCert>>,
    /// Requests in flight on the connection, for its idle timeout.
    pub activity: Activity,
    /// When the connection was accepted.
    pub started: Instant,
    /// What the framing watcher saw of this connection's request heads.
    pub framing: Arc<Framing>,
    /// Cancelled when the shutdown grace has run out: whatever still runs
    /// on the connection (a tunnel) must end.
    pub closing: CancellationToken,
    /// What carries on once hyper has handed the connection over (see
    /// [`ConnInfo::after_upgrade`]).
    upgraded: Mutex<Option<Detached>>,
    /// The peer's address as a header value, made on first use.
    peer_value: OnceLock<HeaderValue>,
}

/// Work that outlives the HTTP exchange on a connection: a tunnel after a
/// `101 Switching Protocols`.
pub type Detached = Pin<Box<dyn Future<Output = ()> + Send>>;

impl ConnInfo {
    /// What a connection from `peer` knows of itself when accepted, over
    /// `proto` (`http` or `https`); `closing` as in [`ConnInfo::closing`].
    pub fn new(peer: SocketAddr, proto: &'static str, closing: CancellationToken) -> ConnInfo {
        let started = Instant::now();
        ConnInfo {
            peer,
            proto,
            client_cert: None,
            activity: Activity::default(),
            started,
            framing: Arc::new(Framing::new(started)),
            closing,
            upgraded: Mutex::new(None),
            peer_value: OnceLock::new(),
        }
    }

    /// The connection, with the verified client certificate `cert` (see
    /// [`ConnInfo::client_cert`]).
    pub fn with_client_cert(self, cert: Option<Arc<PeerCert>>) -> ConnInfo {
        ConnInfo {
            client_cert: cert,
            ..self
        }
    }

    /// The peer's address ([`canonical_ip`] form) as a header value, for
    /// `X-Forwarded-For`: made once, shared by the connection's requests.
    pub fn peer_value(&self) -> &HeaderValue {
        self.peer_value
            .get_or_init(|| ip_value(canonical_ip(self.peer.ip())))
    }

    /// Run `work` on the connection's own task once hyper has upgraded it
    /// (written the 101 and handed over the connection's I/O): a handler
    /// answering `101 Switching Protocols` registers its tunnel here before
    /// it returns the response. The connection stays open, counted and
    /// tracked for shutdown until `work` ends; `work` must end when
    /// [`ConnInfo::closing`] is cancelled.
    pub fn after_upgrade(&self, work: Detached) {
        if let Ok(mut slot) = self.upgraded.lock() {
            *slot = Some(work);
        }
    }

    /// The work registered by [`ConnInfo::after_upgrade`], if any.
    fn take_upgraded(&self) -> Option<Detached> {
        self.upgraded.lock().ok()?.take()
    }
}

/// What a connection's watchdog needs to know to enforce the header-read
/// and idle timeouts: requests in flight, and when the last one ended.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    requests: AtomicU64,
    /// Milliseconds since the connection started, when the last response ended.
    last_end_ms: AtomicU64,
}

impl Activity {
    /// A request head arrived; returns its number on the connection (1-based).
    pub fn begin(&self) -> u64 {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A response ended (sent or abandoned) at `now_ms` since the connection started.
    pub fn end(&self, now_ms: u64) {
        self.last_end_ms.store(now_ms, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// (requests in flight, requests seen, when the last one ended).
    pub fn snapshot(&self) -> (usize, u64, u64) {
        (
            self.in_flight.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
            self.last_end_ms.load(Ordering::Relaxed),
        )
    }
}

/// A response on its way.
pub type Responding = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// What answers the requests of every connection: never fails (every
/// error is a response). The future is boxed: hyper keeps the space of a
/// connection's service future for the connection's whole life, idle or
/// not, so a boxed one costs an idle connection only a pointer.
pub trait Handler: Send + Sync + 'static {
    /// Answer `req`, which came on `conn`.
    fn handle(&self, req: Request<Incoming>, conn: Arc<ConnInfo>) -> Responding;
}

/// The runtimes whose threads accept and serve connections (one per worker
/// thread); unset: the runtime that calls [`Server::serve`].
static THREADS: OnceLock<Vec<tokio::runtime::Handle>> = OnceLock::new();

/// Serve connections on these runtimes' threads, one accept loop each per
/// listener: set once, before the first [`Server::serve`].
pub fn set_threads(handles: Vec<tokio::runtime::Handle>) {
    let _ = THREADS.set(handles);
}

/// The listen backlog: connections beyond `max_connections` wait here.
const BACKLOG: u32 = 1024;

/// How long shutdown waits for connections to close once the grace has run
/// out and they were told to.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Bind a listening socket on `addr` (address reuse on, so a restart does not
/// wait for TIME_WAIT).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// The traffic listeners and the connections they accepted.
pub struct Server {
    settings: Arc<dyn Settings>,
    handler: Arc<dyn Handler>,
    /// One permit per open connection: at `max_connections`, accepting waits.
    permits: Arc<Semaphore>,
    max_connections: Mutex<usize>,
    connections: TaskTracker,
    /// Cancelled at shutdown: every connection finishes its requests and closes.
    shutdown: CancellationToken,
    /// Cancelled when the shutdown grace has run out: every connection and
    /// tunnel still open is closed.
    closing: CancellationToken,
    /// The accept loops, by configured address.
    listeners: Mutex<HashMap<SocketAddr, Listening>>,
}

struct Listening {
    stop: CancellationToken,
}

impl Server {
    /// A server with no listeners yet, whose connections are served as
    /// `settings` says and whose requests go to `handler`.
    pub fn new(
        settings: Arc<dyn Settings>,
        handler: Arc<dyn Handler>,
        max_connections: usize,
    ) -> Arc<Server> {
        Arc::new(Server {
            settings,
            handler,
            permits: Arc::new(Semaphore::new(max_connections)),
            max_connections: Mutex::new(max_connections),
            connections: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            closing: CancellationToken::new(),
            listeners: Mutex::new(HashMap::new()),
        })
    }

    /// The configured addresses being served now.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.listeners
            .lock()
            .map(|l| l.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Start accepting on `listener`, known by its configured address `addr`.
    pub fn serve(self: &Arc<Self>, addr: SocketAddr, listener: TcpListener) {
        let stop = self.shutdown.child_token();
        let local = listener.local_addr().unwrap_or(addr);
        tracing::info!(%addr, %local, "listening");
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.insert(addr, Listening { stop: stop.clone() });
        }
        match THREADS.get() {
            Some(threads) if threads.len() > 1 => self.serve_on(threads, addr, listener, stop),
            _ => {
                let server = self.clone();
                tokio::spawn(async move { server.accept_loop(addr, listener, stop).await });
            }
        }
    }

    /// One accept loop per thread, each on its own copy of `listener`'s
    /// descriptor (registered with that thread's runtime): the kernel hands
    /// each new connection to one of them.
    fn serve_on(
        self: &Arc<Self>,
        threads: &[tokio::runtime::Handle],
        addr: SocketAddr,
        listener: TcpListener,
        stop: CancellationToken,
    ) {
        let listener = match listener.into_std() {
            Ok(l) => l,
            Err(error) => {
                tracing::error!(%addr, %error, "cannot share the listener between threads");
                return;
            }
        };
        for thread in threads {
            let copy = match listener.try_clone() {
                Ok(c) => c,
                Err(error) => {
                    tracing::error!(%addr, %error, "cannot share the listener between threads");
                    continue;
                }
            };
            let (server, stop) = (self.clone(), stop.clone());
            thread.spawn(async move {
                match TcpListener::from_std(copy) {
                    Ok(l) => server.accept_loop(addr, l, stop).await,
                    Err(error) => tracing::error!(%addr, %error, "cannot listen on this thread"),
                }
            });
        }
    }

    /// Stop accepting on `addr`; its open connections carry on.
    pub fn stop(&self, addr: SocketAddr) {
        if let Some(l) = self.listeners.lock().ok().and_then(|mut l| l.remove(&addr)) {
            tracing::info!(%addr, "listener removed");
            l.stop.cancel();
        }
    }

    /// Change the connection limit (a reload may).
    pub fn set_max_connections(&self, wanted: usize) {
        let Ok(mut current) = self.max_connections.lock() else {
            return;
        };
        if wanted > *current {
            self.permits.add_permits(wanted - *current);
        } else if wanted < *current {
            // Permits held by open connections are forgotten as they return.
            let shrink = *current - wanted;
            let forgotten = self.permits.forget_permits(shrink);
            if forgotten < shrink {
                let permits = self.permits.clone();
                let rest = (shrink - forgotten) as u32;
                tokio::spawn(async move {
                    if let Ok(p) = permits.acquire_many_owned(rest).await {
                        p.forget();
                    }
                });
            }
        }
        *current = wanted;
    }

    /// Stop accepting everywhere, ask every connection to finish, and wait up
    /// to `grace` for them (tunnels run on meanwhile); then close what is
    /// still open. Returns whether every connection finished in time.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.clear();
        }
        self.shutdown.cancel();
        self.connections.close();
        if tokio::time::timeout(grace, self.connections.wait())
            .await
            .is_ok()
        {
            return true;
        }
        self.closing.cancel();
        // Closing is immediate; the wait lets tunnels write their access-log
        // lines, and is bounded all the same.
        let _ = tokio::time::timeout(CLOSE_WAIT, self.connections.wait()).await;
        false
    }

    async fn accept_loop(
        self: Arc<Self>,
        addr: SocketAddr,
        listener: TcpListener,
        stop: CancellationToken,
    ) {
        loop {
            let permit = tokio::select! {
                permit = self.permits.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
                _ = stop.cancelled() => return,
            };
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(error) => {
                        // Out of file descriptors and the like: back off, don't spin.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stop.cancelled() => return,
            };
            // TLS or not, and the timeouts, are the config in force's say,
            // read per connection, so a reload that moves an address between
            // the two needs no rebinding, and renewed certificates and new
            // timeouts apply to new connections.
            let serving = self.settings.connection(addr);
            let settings = self.settings.clone();
            let handler = self.handler.clone();
            let shutdown = self.shutdown.clone();
            let closing = self.closing.clone();
            self.connections.spawn(async move {
                settings.connections_changed(1);
                conn::serve(stream, peer, serving, handler, shutdown, closing).await;
                settings.connections_changed(-1);
                drop(permit);
            });
        }
    }
}
