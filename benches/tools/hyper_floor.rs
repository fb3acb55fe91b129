//! The floor of tollgate's stack, for benches/e2e/run (the "hyper floor" row)
//! and for profiling: the plainest HTTP/1.1 reverse proxy that hyper +
//! hyper-util + tokio make, with none of tollgate's logic (no routing, limits,
//! header hygiene, X-Forwarded-For, metrics, logs or timeouts). What tollgate
//! spends per request above this is its own; this is what the stack costs.
//!
//! ```text
//! hyper_floor LISTEN UPSTREAM    e.g. 127.0.0.1:18085 127.0.0.1:18081
//! hyper_floor LISTEN UPSTREAM --headers
//! hyper_floor LISTEN --answer    answer "hello world\n" itself (the server alone)
//! ```
//!
//! `--headers`: the floor also sends the fields every request of tollgate's
//! carries (docs/protocols.md, docs/traces.md): `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Forwarded-Host` and a new `X-Request-Id` and
//! `traceparent` upstream, the `X-Request-Id` back on the response. Nothing
//! else of the gateway (no checks, no stripping): what the fields the gateway
//! must add cost the stack by themselves, its own bytes in the kernel
//! included (the `floor-h` row of `benches/e2e/run --only floor`, "hyper
//! floor + the fields tollgate adds").
//!
//! Like tollgate with TOKIO_WORKER_THREADS=1 (the benches' setting): one
//! current-thread Tokio runtime, the accept loop as a task, TCP_NODELAY on
//! both sides. Unlike it: glibc's allocator (tollgate's is jemalloc,
//! `src/main.rs`), Tokio's multi-thread scheduler for more workers (tollgate
//! runs a current-thread runtime per worker), hyper's
//! `server::conn::http1::Builder` (keep-alive, no timer) instead of the
//! auto (h1 + h2c) builder, and one default `hyper_util::client::legacy::Client`
//! to UPSTREAM, whose response body is streamed back as it comes. Built as an
//! example, it also gets the dev-dependencies' tokio features ("full",
//! "test-util"): about 1.5 % more instructions per request than the same code
//! built as a binary (callgrind).

use std::convert::Infallible;

use anyhow::Context as _;
use bytes::Bytes;
use http::header::{HeaderName, HOST};
use http::uri::{Authority, Uri};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{Either, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Upstream = Client<HttpConnector, Incoming>;
type ProxyBody = Either<Incoming, Empty<Bytes>>;
const HELLO: &[u8] = b"hello world\n";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, target, headers) = match args.as_slice() {
        [listen, target] => (listen, target, false),
        [listen, target, flag] if flag == "--headers" && target != "--answer" => {
            (listen, target, true)
        }
        _ => {
            eprintln!("usage: hyper_floor LISTEN (UPSTREAM [--headers] | --answer)");
            std::process::exit(2);
        }
    };
    let upstream = match target.as_str() {
        "--answer" => None,
        addr => Some(addr.parse::<Authority>().context("UPSTREAM")?),
    };
    // Current-thread for one worker, as tollgate's (src/main.rs); else
    // Tokio's multi-thread scheduler.
    let one = std::env::var("TOKIO_WORKER_THREADS").is_ok_and(|n| n.trim() == "1");
    let runtime = if one {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()?;
    // The accept loop is a task, as tollgate's is.
    runtime.block_on(runtime.spawn(serve(listen.clone(), upstream, headers)))?
}

async fn serve(listen: String, upstream: Option<Authority>, headers: bool) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&listen).await.context("LISTEN")?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        let mut conn = http1::Builder::new();
        conn.keep_alive(true);
        match upstream.clone() {
            None => tokio::spawn(async move {
                let _ = conn.serve_connection(io, service_fn(answer)).await;
            }),
            Some(authority) => {
                let client = client.clone();
                let peer = headers
                    .then(|| HeaderValue::from_str(&peer.ip().to_string()).expect("an address"));
                let svc = service_fn(move |req| {
                    forward(client.clone(), authority.clone(), peer.clone(), req)
                });
                tokio::spawn(async move {
                    let _ = conn.serve_connection(io, svc).await;
                })
            }
        };
    }
}

async fn answer(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(HELLO))))
}

/// `peer`: the client's address when `--headers` is on.
async fn forward(
    client: Upstream,
    authority: Authority,
    peer: Option<HeaderValue>,
    mut req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let request_id = peer
        .as_ref()
        .map(|peer| add_headers(req.headers_mut(), peer));
    let mut parts = std::mem::take(req.uri_mut()).into_parts();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = Some(authority);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    *req.uri_mut() = Uri::from_parts(parts).expect("scheme, authority and path are set");
    Ok(match client.request(req).await {
        Ok(mut resp) => {
            if let Some(id) = request_id {
                resp.headers_mut().insert(X_REQUEST_ID, id);
            }
            resp.map(Either::Left)
        }
        Err(_) => {
            let mut resp = Response::new(Either::Right(Empty::new()));
            *resp.status_mut() = StatusCode::BAD_GATEWAY;
            resp
        }
    })
}

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `--headers`: the fields tollgate adds to every request it forwards, with
/// values of the same lengths, made as cheaply as tollgate makes them (hex
/// digits from a table, one allocation per value); returns the request id,
/// for the response.
fn add_headers(headers: &mut HeaderMap, peer: &HeaderValue) -> HeaderValue {
    let host = headers.get(HOST).cloned();
    headers.insert(HeaderName::from_static("x-forwarded-for"), peer.clone());
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static("http"),
    );
    if let Some(host) = host {
        headers.insert(HeaderName::from_static("x-forwarded-host"), host);
    }
    let mut trace = [0u8; 32];
    hex_into(&fastrand::u128(1..).to_be_bytes(), &mut trace);
    let id = HeaderValue::from_maybe_shared(Bytes::from_owner(trace)).expect("hex digits");
    headers.insert(X_REQUEST_ID, id.clone());
    let mut parent = [0u8; 55];
    parent[..3].copy_from_slice(b"00-");
    parent[3..35].copy_from_slice(&trace);
    parent[35] = b'-';
    hex_into(&fastrand::u64(1..).to_be_bytes(), &mut parent[36..52]);
    parent[52..].copy_from_slice(b"-00");
    headers.insert(
        HeaderName::from_static("traceparent"),
        HeaderValue::from_bytes(&parent).expect("hex digits and dashes"),
    );
    id
}

/// `bytes` as lower-case hex digits into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}
