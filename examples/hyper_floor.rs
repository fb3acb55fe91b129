//! The floor of tollgate's stack, for benches/e2e/run (the "hyper floor" row)
//! and for profiling: the plainest HTTP/1.1 reverse proxy that hyper +
//! hyper-util + tokio make, with none of tollgate's logic (no routing, limits,
//! header hygiene, X-Forwarded-For, metrics, logs or timeouts). What tollgate
//! spends per request above this is its own; this is what the stack costs.
//!
//! ```text
//! hyper_floor LISTEN UPSTREAM    e.g. 127.0.0.1:18085 127.0.0.1:18081
//! hyper_floor LISTEN --answer    answer "hello world\n" itself (the server alone)
//! ```
//!
//! Like tollgate: Tokio's current-thread scheduler when TOKIO_WORKER_THREADS=1,
//! else the multi-thread one, the accept loop as a task, glibc's allocator, TCP_NODELAY on both sides. Unlike it:
//! hyper's `server::conn::http1::Builder` (keep-alive, no timer) instead of the
//! auto (h1 + h2c) builder, and one default `hyper_util::client::legacy::Client`
//! to UPSTREAM, whose response body is streamed back as it comes. Built as an
//! example, it also gets the dev-dependencies' tokio features ("full",
//! "test-util"): about 1.5 % more instructions per request than the same code
//! built as a binary (callgrind).

use std::convert::Infallible;

use anyhow::Context as _;
use bytes::Bytes;
use http::uri::{Authority, Uri};
use http::{Request, Response, StatusCode};
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
    let [listen, target] = args.as_slice() else {
        eprintln!("usage: hyper_floor LISTEN (UPSTREAM | --answer)");
        std::process::exit(2);
    };
    let upstream = match target.as_str() {
        "--answer" => None,
        addr => Some(addr.parse::<Authority>().context("UPSTREAM")?),
    };
    // The scheduler tollgate picks (src/main.rs): current-thread for one
    // worker, else multi-thread.
    let one = std::env::var("TOKIO_WORKER_THREADS").is_ok_and(|n| n.trim() == "1");
    let runtime = if one {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()?;
    // The accept loop is a task, as tollgate's is.
    runtime.block_on(runtime.spawn(serve(listen.clone(), upstream)))?
}

async fn serve(listen: String, upstream: Option<Authority>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&listen).await.context("LISTEN")?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let (stream, _) = listener.accept().await?;
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
                let svc = service_fn(move |req| forward(client.clone(), authority.clone(), req));
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

async fn forward(
    client: Upstream,
    authority: Authority,
    mut req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let mut parts = std::mem::take(req.uri_mut()).into_parts();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = Some(authority);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    *req.uri_mut() = Uri::from_parts(parts).expect("scheme, authority and path are set");
    Ok(match client.request(req).await {
        Ok(resp) => resp.map(Either::Left),
        Err(_) => {
            let mut resp = Response::new(Either::Right(Empty::new()));
            *resp.status_mut() = StatusCode::BAD_GATEWAY;
            resp
        }
    })
}
