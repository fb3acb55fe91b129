//! HTTP clients for the tests: hyper-util's legacy (pooled) client for
//! HTTP/1.1 and h2c prior knowledge, one bound to a chosen source address, and
//! one-connection senders that control `Host` / `:authority` exactly.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::{Body, BoxError};

/// Every request made through these helpers must finish within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled client.
pub type HttpClient = Client<HttpConnector, Body>;

/// A response with its body collected.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: Option<HeaderMap>,
}

impl Resp {
    /// The first value of a header, as a string.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}): status {} headers {:?} body {:?}",
                self.status,
                self.headers,
                self.text()
            )
        })
    }

    /// For an echo response: the path the upstream saw.
    pub fn echo_path(&self) -> String {
        self.json()["path"]
            .as_str()
            .unwrap_or_else(|| panic!("not an echo response: {}", self.text()))
            .to_string()
    }

    /// For an echo response: which upstream answered.
    pub fn upstream(&self) -> String {
        self.header("x-upstream").unwrap_or("").to_string()
    }

    /// Asserts the gateway's JSON error shape: `{"error": code, "request_id":
    /// <the x-request-id header>}` with the given status.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "expected {status} {code}, got {} {:?} body {:?}",
            self.status,
            self.headers,
            self.text()
        );
        let v = self.json();
        assert_eq!(v["error"], code, "error code in body {}", self.text());
        let rid = self
            .header("x-request-id")
            .unwrap_or_else(|| panic!("no x-request-id on {} response", self.status));
        assert!(!rid.is_empty(), "empty x-request-id");
        assert_eq!(
            v["request_id"], rid,
            "request_id in body must equal the x-request-id header"
        );
    }
}

/// A body from bytes.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|e| match e {}).boxed()
}

fn connector() -> HttpConnector {
    let mut c = HttpConnector::new();
    c.set_connect_timeout(Some(Duration::from_secs(3)));
    c.set_nodelay(true);
    c
}

/// A pooled HTTP/1.1 client.
pub fn h1() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(connector())
}

/// A pooled h2c (prior knowledge) client.
pub fn h2c() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector())
}

/// An HTTP/1.1 client whose connections come from `ip` (e.g. `127.0.0.2`).
pub fn h1_from(ip: IpAddr) -> HttpClient {
    let mut c = connector();
    c.set_local_address(Some(ip));
    Client::builder(TokioExecutor::new()).build(c)
}

/// A request builder for `http://{addr}{path}`.
pub fn req(method: Method, addr: SocketAddr, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
}

/// Collects a response (with the request timeout).
pub async fn collect(resp: Response<Incoming>) -> Result<Resp, String> {
    let (parts, body) = resp.into_parts();
    let collected = tokio::time::timeout(REQUEST_TIMEOUT, body.collect())
        .await
        .map_err(|_| "timed out reading the response body".to_string())?
        .map_err(|e| format!("error reading the response body: {e}"))?;
    let trailers = collected.trailers().cloned();
    Ok(Resp {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    })
}

/// Sends a request; any failure (connect, reset, timeout) is an `Err`.
pub async fn try_send(client: &HttpClient, req: Request<Body>) -> Result<Resp, String> {
    let what = format!("{} {}", req.method(), req.uri());
    let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req))
        .await
        .map_err(|_| format!("{what}: timed out waiting for the response head"))?
        .map_err(|e| format!("{what}: {e:?}"))?;
    collect(resp).await
}

/// Sends a request; panics on any failure.
pub async fn send(client: &HttpClient, req: Request<Body>) -> Resp {
    match try_send(client, req).await {
        Ok(r) => r,
        Err(e) => panic!("request failed: {e}"),
    }
}

/// `GET http://{addr}{path}` over HTTP/1.1 on a fresh client.
pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    send(&h1(), req(Method::GET, addr, path).body(empty()).unwrap()).await
}

/// `GET` with extra headers over HTTP/1.1 on a fresh client.
pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut b = req(Method::GET, addr, path);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    send(&h1(), b.body(empty()).unwrap()).await
}

/// `GET http://{addr}{path}` over h2c on a fresh client.
pub async fn get_h2c(addr: SocketAddr, path: &str) -> Resp {
    send(&h2c(), req(Method::GET, addr, path).body(empty()).unwrap()).await
}

/// Which protocol a one-connection sender speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2c,
}

/// Sends one request on a new connection to `addr`, whatever the request's
/// URI or Host say. For HTTP/1.1 the URI's path and query are written as the
/// request-target (and `Host` is the URI's authority unless set); for h2c the
/// URI (which must be absolute) gives `:scheme` and `:authority`.
pub async fn send_on_new_conn(
    addr: SocketAddr,
    proto: Proto,
    req: Request<Body>,
) -> Result<Resp, String> {
    let stream = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let io = TokioIo::new(stream);
    let fut = async move {
        match proto {
            Proto::H1 => {
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .map_err(|e| format!("h1 handshake: {e}"))?;
                tokio::spawn(conn);
                let (mut parts, body) = req.into_parts();
                // Like any HTTP/1.1 client: Host from the URI unless given.
                if !parts.headers.contains_key(http::header::HOST) {
                    if let Some(a) = parts.uri.authority() {
                        let v = http::HeaderValue::from_str(a.as_str())
                            .map_err(|e| format!("host: {e}"))?;
                        parts.headers.insert(http::header::HOST, v);
                    }
                }
                let pq = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| "/".into());
                parts.uri = pq.parse().map_err(|e| format!("uri: {e}"))?;
                let resp = sender
                    .send_request(Request::from_parts(parts, body))
                    .await
                    .map_err(|e| format!("h1 request: {e:?}"))?;
                collect(resp).await
            }
            Proto::H2c => {
                let (mut sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                        .await
                        .map_err(|e| format!("h2 handshake: {e}"))?;
                tokio::spawn(conn);
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(|e| format!("h2 request: {e:?}"))?;
                collect(resp).await
            }
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| "request timed out".to_string())?
}

/// `GET path` with `Host: host` on a new HTTP/1.1 connection.
pub async fn get_host(addr: SocketAddr, host: &str, path: &str) -> Resp {
    let r = Request::builder()
        .uri(path)
        .header("host", host)
        .body(empty())
        .unwrap();
    send_on_new_conn(addr, Proto::H1, r)
        .await
        .unwrap_or_else(|e| panic!("GET {path} Host {host}: {e}"))
}

/// `GET path` with `:authority = authority` on a new h2c connection.
pub async fn get_authority_h2c(addr: SocketAddr, authority: &str, path: &str) -> Resp {
    let r = Request::builder()
        .uri(format!("http://{authority}{path}"))
        .body(empty())
        .unwrap();
    send_on_new_conn(addr, Proto::H2c, r)
        .await
        .unwrap_or_else(|e| panic!("h2c GET {path} authority {authority}: {e}"))
}

/// A boxed body from anything that is a body.
pub fn boxed<B>(b: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    b.map_err(Into::into).boxed()
}
