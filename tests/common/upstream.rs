//! An in-process echo upstream (hyper 1.x; HTTP/1.1 and h2c on one port).
//!
//! Every request is answered with JSON
//! `{upstream, method, path, host, headers: [[name, value], ...], body_len,
//! http_version, trailers}` and the header `x-upstream: <name>`, except:
//!
//! - `/status/{code}`: the echo JSON with that status;
//! - `/delay/{ms}`: sleeps, then echoes;
//! - `/download/{bytes}`: streams that many bytes of the test pattern in 64 KiB
//!   chunks (never allocated whole);
//! - `/upload`: stream-consumes the body and answers `{len, checksum,
//!   pattern_ok}`;
//! - `/trailers`: a body followed by trailers `x-trailer-one: 1`,
//!   `grpc-status: 0` (declared in a `Trailer` header; over HTTP/1.1 they are
//!   sent only to a client that sent `TE: trailers`);
//! - `/hop`: a response carrying hop-by-hop headers;
//! - `/close`: the connection is dropped without an answer.
//!
//! [`Echo::fail_with`] makes every answer (health probes too) carry one
//! status until [`Echo::recover`], for a target that goes bad and comes back.
//!
//! The echo counts accepted connections, requests (at the moment their head
//! arrives), requests whose body arrived whole, and body bytes, and records
//! each request's head. [`Echo::drop_connections`] closes every open
//! connection (without `Connection: close` or GOAWAY) and keeps listening.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::{matches_pattern, pattern_block, Body, BoxError, Checksum, PATTERN_LEN};

/// The head of one request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path with query, as received.
    pub path: String,
    /// The Host header, else the URI authority (h2 `:authority`).
    pub host: Option<String>,
    /// Header names (lowercase) and values, in arrival order.
    pub headers: Vec<(String, String)>,
    pub version: String,
    /// The client address of the connection (the gateway's side).
    pub peer: SocketAddr,
}

impl Recorded {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }

    /// Every value of a header.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }
}

#[derive(Default)]
struct State {
    connections: AtomicUsize,
    /// Connections open right now.
    open: AtomicUsize,
    /// Notified to drop every open connection.
    kick: tokio::sync::Notify,
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    completed: AtomicUsize,
    body_bytes: AtomicU64,
    log: Mutex<Vec<Recorded>>,
    /// The status every answer carries; 0: as the path says.
    fail: AtomicU16,
}

/// A running echo upstream; stops (listener and every connection) on drop.
pub struct Echo {
    name: String,
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Echo {
    /// Starts an echo upstream named `name` on a free port.
    pub async fn start(name: &str) -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind echo upstream");
        let addr = listener.local_addr().expect("echo local addr");
        let state = Arc::new(State::default());
        let name_owned = name.to_string();
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(x) => x,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                // Reap finished connections so the set does not grow forever.
                while conns.try_join_next().is_some() {}
                st.connections.fetch_add(1, Ordering::SeqCst);
                st.open.fetch_add(1, Ordering::SeqCst);
                let open = Open(st.clone());
                let kick = st.clone();
                let st = st.clone();
                let name = name_owned.clone();
                conns.spawn(async move {
                    // Listen for a kick from the start, before any request.
                    let kicked = kick.kick.notified();
                    let svc = service_fn(move |req| handle(st.clone(), name.clone(), peer, req));
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let serve = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = serve => {}
                        _ = kicked => {}
                    }
                    drop(open);
                });
            }
        });
        Echo {
            name: name.to_string(),
            addr,
            state,
            task,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// TCP connections open right now (a response cut short by the gateway
    /// closes its HTTP/1.1 connection).
    pub fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// Drops every open connection abruptly (no `Connection: close`, no
    /// GOAWAY), as an upstream closing idle keep-alive connections does;
    /// keeps listening.
    pub fn drop_connections(&self) {
        self.state.kick.notify_waiters();
    }

    /// Requests received so far (counted when their head arrived).
    pub fn count(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests whose body was received whole (ended without an error).
    pub fn completed(&self) -> usize {
        self.state.completed.load(Ordering::SeqCst)
    }

    /// Requests being handled right now.
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// Request body bytes received so far, over all requests.
    pub fn body_bytes(&self) -> u64 {
        self.state.body_bytes.load(Ordering::SeqCst)
    }

    /// The last request's head.
    pub fn last(&self) -> Option<Recorded> {
        self.state.log.lock().unwrap().last().cloned()
    }

    /// Every request's head, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.log.lock().unwrap().clone()
    }

    /// Answers every request from now on with `status` (and the echo body).
    pub fn fail_with(&self, status: u16) {
        self.state.fail.store(status, Ordering::SeqCst);
    }

    /// Answers as the path says again.
    pub fn recover(&self) {
        self.state.fail.store(0, Ordering::SeqCst);
    }

    /// Requests received so far for `path` (without its query).
    pub fn count_path(&self, path: &str) -> usize {
        self.state
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path.split('?').next() == Some(path))
            .count()
    }

    /// Stops listening and drops every open connection.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn version_str(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "?",
    }
}

fn pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// One open connection, counted down when its task ends.
struct Open(Arc<State>);
impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

struct InFlight(Arc<State>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    st: Arc<State>,
    name: String,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, BoxError> {
    let (parts, mut body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let host = parts
        .headers
        .get(http::header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| parts.uri.authority().map(|a| a.to_string()));
    let rec = Recorded {
        method: parts.method.to_string(),
        path: path.clone(),
        host: host.clone(),
        headers: pairs(&parts.headers),
        version: version_str(parts.version).to_string(),
        peer,
    };
    st.log.lock().unwrap().push(rec.clone());
    st.requests.fetch_add(1, Ordering::SeqCst);
    st.in_flight.fetch_add(1, Ordering::SeqCst);
    let _guard = InFlight(st.clone());

    let fail = st.fail.load(Ordering::SeqCst);
    if fail != 0 {
        let v = json!({"upstream": name, "method": rec.method, "path": path});
        return Ok(json_response(&name, StatusCode::from_u16(fail)?, v));
    }
    let p = parts.uri.path().to_string();
    if p == "/close" {
        return Err("closing the connection on purpose".into());
    }

    // Consume the body as a stream, counting (and for /upload checking) it.
    let mut sum = Checksum::new();
    let mut pattern_ok = true;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(data) => {
                st.body_bytes.fetch_add(data.len() as u64, Ordering::SeqCst);
                if p == "/upload" {
                    pattern_ok &= matches_pattern(sum.len(), &data);
                    sum.update(&data);
                } else {
                    sum.len += data.len() as u64;
                }
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }

    st.completed.fetch_add(1, Ordering::SeqCst);

    let mut status = StatusCode::OK;
    if let Some(code) = p.strip_prefix("/status/") {
        status = code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::BAD_REQUEST);
    }
    if let Some(ms) = p.strip_prefix("/delay/") {
        let ms: u64 = ms.parse().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(n) = p.strip_prefix("/download/") {
        let n: u64 = n.parse().unwrap_or(0);
        let mut resp = Response::new(PatternBody::new(n, true).boxed());
        resp.headers_mut()
            .insert("x-upstream", HeaderValue::from_str(&name)?);
        return Ok(resp);
    }
    if p == "/upload" {
        let v = json!({
            "upstream": name,
            "len": sum.len(),
            "checksum": sum.hex(),
            "pattern_ok": pattern_ok,
        });
        return Ok(json_response(&name, StatusCode::OK, v));
    }
    if p == "/trailers" {
        let mut t = HeaderMap::new();
        t.insert("x-trailer-one", HeaderValue::from_static("1"));
        t.insert("grpc-status", HeaderValue::from_static("0"));
        let body = FramesBody::new(vec![
            Frame::data(Bytes::from_static(b"trailers-body")),
            Frame::trailers(t),
        ]);
        let mut resp = Response::new(body.boxed());
        resp.headers_mut()
            .insert("x-upstream", HeaderValue::from_str(&name)?);
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("text/plain"));
        // HTTP/1.1 (hyper) only sends trailers that were declared.
        resp.headers_mut().insert(
            "trailer",
            HeaderValue::from_static("x-trailer-one, grpc-status"),
        );
        return Ok(resp);
    }

    let v = json!({
        "upstream": name,
        "method": rec.method,
        "path": path,
        "host": host,
        "headers": rec.headers.iter().map(|(n, v)| vec![n.clone(), v.clone()]).collect::<Vec<_>>(),
        "body_len": sum.len(),
        "http_version": rec.version,
        "trailers": trailers.as_ref().map(pairs).unwrap_or_default()
            .into_iter().map(|(n, v)| vec![n, v]).collect::<Vec<_>>(),
    });
    let mut resp = json_response(&name, status, v);
    if p == "/hop" {
        let h = resp.headers_mut();
        h.insert("connection", HeaderValue::from_static("x-resp-private"));
        h.insert("x-resp-private", HeaderValue::from_static("secret"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=30"));
        h.insert("proxy-authenticate", HeaderValue::from_static("Basic"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("upgrade", HeaderValue::from_static("foo/1"));
        h.insert("x-resp-public", HeaderValue::from_static("visible"));
    }
    Ok(resp)
}

fn json_response(name: &str, status: StatusCode, v: serde_json::Value) -> Response<Body> {
    let body = Full::new(Bytes::from(v.to_string()))
        .map_err(|e: Infallible| -> BoxError { match e {} })
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(name) {
        resp.headers_mut().insert("x-upstream", v);
    }
    resp
}

/// A body of `len` bytes of the test pattern, produced 64 KiB at a time from
/// one shared block (no allocation per chunk).
pub struct PatternBody {
    remaining: u64,
    exact_size: bool,
}

impl PatternBody {
    /// `exact_size`: report the length (so HTTP/1.1 uses Content-Length);
    /// otherwise the length is unknown (chunked).
    pub fn new(len: u64, exact_size: bool) -> Self {
        PatternBody {
            remaining: len,
            exact_size,
        }
    }
}

impl HttpBody for PatternBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let take = self.remaining.min(PATTERN_LEN as u64) as usize;
        self.remaining -= take as u64;
        Poll::Ready(Some(Ok(Frame::data(pattern_block().slice(..take)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact_size {
            SizeHint::with_exact(self.remaining)
        } else {
            SizeHint::default()
        }
    }
}

/// A body made of the given frames (data and trailers).
pub struct FramesBody {
    frames: VecDeque<Frame<Bytes>>,
}

impl FramesBody {
    pub fn new(frames: Vec<Frame<Bytes>>) -> Self {
        FramesBody {
            frames: frames.into(),
        }
    }
}

impl HttpBody for FramesBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.frames.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }
}

/// An upstream that accepts connections and never reads from them or
/// writes to them (a TLS handshake with it never ends); its connections
/// stay open as long as the test runs.
pub async fn black_hole() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}
