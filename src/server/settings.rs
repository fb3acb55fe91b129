//! What the server needs from the gateway it serves: the settings of each
//! connection, read when it is accepted, and somewhere to report
//! connections opening and closing. The server reads them through
//! [`Settings`], which the gateway implements over its config generation in
//! force, so the server depends on nothing of the gateway's and a reload
//! (new timeouts, TLS moved between addresses, renewed certificates)
//! applies to the connections accepted after it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// What the server reads from, and tells, the gateway it serves.
pub trait Settings: Send + Sync + 'static {
    /// How to serve a connection accepted now on the configured listen
    /// address `addr`. Read once per connection: what it says holds for
    /// the connection's whole life.
    fn connection(&self, addr: SocketAddr) -> ConnSettings;

    /// The number of open connections changed by `delta` (`1` when one is
    /// accepted, `-1` when it closes), for the gateway's gauge.
    fn connections_changed(&self, delta: i64);
}

/// The settings one connection is served with.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    /// The TLS config, for an address served over TLS; `None`: plain.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The timeouts the connection's watchdog applies.
    pub timeouts: Timeouts,
    /// The largest request head, in bytes (`server.max_header_bytes`).
    pub max_header_bytes: usize,
    /// The largest chunk size the framing watcher lets through
    /// (`server.max_body_bytes`; `u64::MAX` for no limit).
    pub max_chunk_bytes: u64,
}

/// The connection timeouts the watchdog applies (`server.timeouts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From a request head's first byte to its end; also a TLS handshake's
    /// limit.
    pub header_read: Duration,
    /// With no request in progress, from the start or the last response's
    /// end.
    pub idle: Duration,
    /// A write that makes no progress.
    pub send: Duration,
}
