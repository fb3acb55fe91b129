//! Shared fixtures for the black-box tests: the real `tollgate` binary
//! ([`gateway::Gateway`]) and the one-route config most tests give it
//! ([`one_route::OneRoute`]), in-process echo upstreams ([`upstream::Echo`]),
//! HTTP clients ([`client`]), a raw TCP helper ([`raw`]) for requests no
//! well-behaved client would send, a mock LLM upstream ([`llm`]) and a real
//! `redis-server` ([`redis`]).
//! Every process they start ends with the test binary ([`reaper`]).
//!
//! Every network call has a timeout so that a broken gateway fails a test
//! instead of hanging it. Every listener binds port 0 itself and is asked
//! which port it got, except redis-server, which is given a port and retried
//! on another when that one was taken.
#![allow(dead_code)]

pub mod client;
pub mod cluster;
pub mod failover;
pub mod gateway;
pub mod jwks;
pub mod jwt;
pub mod limits;
pub mod llm;
pub mod one_route;
pub mod otlp;
pub mod pattern;
pub mod pki;
pub mod raw;
pub mod redis;
pub mod simulate;
pub mod stores;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

// Not every test binary uses every fixture.
#[allow(unused_imports)]
pub use client::Resp;
#[allow(unused_imports)]
pub use gateway::Gateway;
#[allow(unused_imports)]
pub use one_route::OneRoute;
#[allow(unused_imports)]
pub use pattern::{matches_pattern, pattern_block, pattern_checksum, Checksum, PATTERN_LEN};
#[allow(unused_imports)]
pub use tollgate_testkit::reaper;
#[allow(unused_imports)]
pub use upstream::Echo;

/// The boxed error every fixture body uses.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The request/response body type of the fixtures.
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, BoxError>;

/// A loopback address that refuses connections: a socket bound to
/// `127.0.0.1:0` that never listens, so the port stays reserved (no other
/// process can listen on it) for as long as the value lives.
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    addr: SocketAddr,
}

impl ClosedPort {
    /// Binds the socket.
    pub fn bind() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind 127.0.0.1:0");
        let addr = socket.local_addr().expect("the bound address");
        ClosedPort {
            _socket: socket,
            addr,
        }
    }

    /// `127.0.0.1:<the reserved port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Removes the common leading indentation of a multi-line string (so YAML can
/// be written indented inside test functions) and a leading blank line.
pub fn dedent(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    let mut started = false;
    for l in lines {
        if !started && l.trim().is_empty() {
            continue;
        }
        started = true;
        if l.len() >= indent {
            out.push_str(&l[indent..]);
        }
        out.push('\n');
    }
    out
}

/// A config: `server.listen: ["@LISTEN@"]`, `admin.listen: "@ADMIN@"`, then
/// `rest` (dedented). The placeholders are filled in by [`Gateway`].
pub fn config(rest: &str) -> String {
    config_with_server("", rest)
}

/// Like [`config`], with `store` (a flow map, the `store:` line's value)
/// before `rest`.
pub fn config_with_store(store: &str, rest: &str) -> String {
    config(&format!("store: {store}\n{}", dedent(rest)))
}

/// Like [`config`], with extra `server:` keys (dedented, then indented under
/// `server:`).
pub fn config_with_server(server_extra: &str, rest: &str) -> String {
    head("\"@LISTEN@\"", server_extra, "") + &dedent(rest)
}

/// `server:` listening on `listen` (a flow list's items) with `server_extra`
/// keys, and `admin:` on `@ADMIN@` with `admin_extra` keys.
fn head(listen: &str, server_extra: &str, admin_extra: &str) -> String {
    format!(
        "server:\n  listen: [{listen}]\n{}admin:\n  listen: \"@ADMIN@\"\n{}",
        indent(&dedent(server_extra), 2),
        indent(&dedent(admin_extra), 2)
    )
}

/// `lines` with every line indented by `by` spaces.
fn indent(lines: &str, by: usize) -> String {
    lines.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
}

/// Polls `f` every 25 ms until it returns `Some`, or panics with `what` after
/// `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
