//! gRPC end to end through the real binary (docs/protocols.md): a real gRPC server
//! (tonic's server-side codec on hyper's HTTP/2, over h2c and over TLS) and
//! a real gRPC client (tonic's `Channel`, over h2c and over the gateway's
//! TLS listener). Unary and bidirectional streaming calls (interleaved, so
//! nothing is buffered), response trailers and trailing metadata, request
//! trailers, a Trailers-Only error passed through, deadlines (`grpc-timeout`
//! never outlives the route timeout), and the gateway's own errors as
//! `grpc-status` as the client library reads them.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tonic::codegen::Service;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_prost::ProstCodec;

use common::gateway::Gateway;
use common::pki::Pki;
use common::{config_with_server, ClosedPort};

/// The request message of the test service.
#[derive(Clone, PartialEq, prost::Message)]
struct Ping {
    #[prost(string, tag = "1")]
    text: String,
    /// How long the server waits before answering (unary).
    #[prost(uint32, tag = "2")]
    delay_ms: u32,
}

/// The response: the text back, and what the server saw of the request.
#[derive(Clone, PartialEq, prost::Message)]
struct Pong {
    #[prost(string, tag = "1")]
    text: String,
    /// The `grpc-timeout` the server received ("" when none).
    #[prost(string, tag = "2")]
    grpc_timeout: String,
    /// The `x-forwarded-proto` the server received.
    #[prost(string, tag = "3")]
    forwarded_proto: String,
    /// The request trailers the server received, `name=value;...`.
    #[prost(string, tag = "4")]
    request_trailers: String,
}

// ------------------------------------------------------------------ server

/// A unary handler as a tower `Service`, the shape tonic's server takes.
struct Unary<F>(F);

impl<F, Fut> Service<tonic::Request<Ping>> for Unary<F>
where
    F: FnMut(tonic::Request<Ping>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Pong>, Status>>,
{
    type Response = tonic::Response<Pong>;
    type Error = Status;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Ping>) -> Fut {
        (self.0)(request)
    }
}

type PongStream = Pin<Box<dyn Stream<Item = Result<Pong, Status>> + Send>>;

/// Bidirectional streaming: one `Pong` (the text upper-cased) per `Ping`, as
/// each arrives; the call ends when the client's stream does.
struct Chat;

impl Service<tonic::Request<Streaming<Ping>>> for Chat {
    type Response = tonic::Response<PongStream>;
    type Error = Status;
    type Future = std::future::Ready<Result<Self::Response, Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Streaming<Ping>>) -> Self::Future {
        let pongs = request.into_inner().map(|ping| {
            ping.map(|p| Pong {
                text: p.text.to_uppercase(),
                ..Pong::default()
            })
        });
        std::future::ready(Ok(tonic::Response::new(Box::pin(pongs))))
    }
}

type GrpcBody = tonic::body::Body;

/// The trailing metadata every successful response of the test server
/// carries besides `grpc-status`.
const SERVER_TRAILER: (&str, &str) = ("x-served-by", "test-upstream");

/// Adds [`SERVER_TRAILER`] to a response's trailers.
fn with_server_trailer(response: Response<GrpcBody>) -> Response<GrpcBody> {
    response.map(|body| {
        GrpcBody::new(body.map_frame(|frame| match frame.into_trailers() {
            Ok(mut trailers) => {
                trailers.insert(SERVER_TRAILER.0, HeaderValue::from_static(SERVER_TRAILER.1));
                Frame::trailers(trailers)
            }
            Err(frame) => frame,
        }))
    })
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// One gRPC message, length-prefixed (uncompressed).
fn frame_message(message: &impl prost::Message) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(0);
    out.put_u32(message.encoded_len() as u32);
    message.encode(&mut out).unwrap();
    out.freeze()
}

/// The first length-prefixed message of `body`.
fn unframe<M: prost::Message + Default>(mut body: Bytes) -> M {
    assert_eq!(body.get_u8(), 0, "uncompressed");
    let len = body.get_u32() as usize;
    M::decode(&body[..len]).unwrap()
}

/// The test server's methods under `/test.Echo/`.
async fn serve_grpc(req: Request<Incoming>) -> Result<Response<GrpcBody>, Infallible> {
    let grpc_timeout = header(req.headers(), "grpc-timeout");
    let forwarded_proto = header(req.headers(), "x-forwarded-proto");
    let traceparent = header(req.headers(), "traceparent");
    let path = req.uri().path().to_owned();
    let response = match path.as_str() {
        "/test.Echo/Unary" => {
            let svc = Unary(move |request: tonic::Request<Ping>| {
                let (grpc_timeout, forwarded_proto, traceparent) = (
                    grpc_timeout.clone(),
                    forwarded_proto.clone(),
                    traceparent.clone(),
                );
                async move {
                    let ping = request.into_inner();
                    tokio::time::sleep(Duration::from_millis(ping.delay_ms.into())).await;
                    let mut response = tonic::Response::new(Pong {
                        text: ping.text,
                        grpc_timeout,
                        forwarded_proto,
                        ..Pong::default()
                    });
                    // What the upstream saw of the trace, sent back.
                    if let Ok(seen) = traceparent.parse() {
                        response.metadata_mut().insert("x-seen-traceparent", seen);
                    }
                    Ok(response)
                }
            });
            let codec = ProstCodec::<Pong, Ping>::default();
            with_server_trailer(tonic::server::Grpc::new(codec).unary(svc, req).await)
        }
        "/test.Echo/Chat" => {
            let codec = ProstCodec::<Pong, Ping>::default();
            with_server_trailer(tonic::server::Grpc::new(codec).streaming(Chat, req).await)
        }
        "/test.Echo/Deny" => {
            // An error before any message: a Trailers-Only response.
            let svc = Unary(|_: tonic::Request<Ping>| async {
                let mut status = Status::permission_denied("not for you");
                status
                    .metadata_mut()
                    .insert("x-reason", "test-policy".parse().unwrap());
                Err(status)
            });
            let codec = ProstCodec::<Pong, Ping>::default();
            tonic::server::Grpc::new(codec).unary(svc, req).await
        }
        "/test.Echo/Trailers" => {
            // Written by hand: tonic's server does not show request trailers.
            let collected = req.into_body().collect().await.unwrap();
            let seen = collected
                .trailers()
                .map(|t| {
                    t.iter()
                        .map(|(k, v)| format!("{k}={}", v.to_str().unwrap()))
                        .collect::<Vec<_>>()
                        .join(";")
                })
                .unwrap_or_default();
            let ping: Ping = unframe(collected.to_bytes());
            let pong = Pong {
                text: ping.text,
                request_trailers: seen,
                ..Pong::default()
            };
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let frames = futures_util::stream::iter([
                Ok::<_, Status>(Frame::data(frame_message(&pong))),
                Ok(Frame::trailers(trailers)),
            ]);
            Response::builder()
                .header("content-type", "application/grpc")
                .body(GrpcBody::new(StreamBody::new(frames)))
                .unwrap()
        }
        _ => Status::unimplemented(path).into_http(),
    };
    Ok(response)
}

/// A gRPC server on a free port: h2c, or TLS (ALPN h2) with a certificate
/// for `localhost` from `pki`. Stops when dropped.
struct GrpcServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcServer {
    async fn start(tls: Option<&Pki>) -> GrpcServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.map(|pki| {
            let (cert, key) = pki.issue(&["localhost"], "grpc-upstream");
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap();
            config.alpn_protocols = vec![b"h2".to_vec()];
            TlsAcceptor::from(Arc::new(config))
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    let service = service_fn(serve_grpc);
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        GrpcServer { addr, task }
    }
}

// ------------------------------------------------------------------ client

/// Where the gateway's TLS listener is configured.
const TLS_LISTEN: &str = "127.0.0.6:0";

/// A gateway in front of an h2c gRPC server and a TLS one (chosen by the
/// `x-up: tls` header), with a dead upstream (`x-up: dead`), a limited
/// service (`/test.Limited/`, 2 calls per hour per client), the route
/// timeout 1 s, and a TLS listener with a certificate for `gw.test`.
struct Setup {
    pki: Pki,
    gw: Gateway,
    _h2c: GrpcServer,
    _tls: GrpcServer,
    _closed: ClosedPort,
}

async fn setup(server_extra: &str) -> Setup {
    let pki = Pki::new();
    let h2c = GrpcServer::start(None).await;
    let tls = GrpcServer::start(Some(&pki)).await;
    let (cert, key) = pki.issue(&["gw.test"], "gw");
    let closed = ClosedPort::bind();
    let server = format!(
        "tls:\n  listen: [\"{TLS_LISTEN}\"]\n  certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n{server_extra}",
        cert.display(),
        key.display()
    );
    let rest = format!(
        r#"
        upstreams:
          h2c: {{ targets: ["http://{h2c}"], http2: true }}
          tls: {{ targets: ["https://{tls}"], http2: true, tls: {{ ca: "{ca}", server_name: localhost }} }}
          dead: {{ targets: ["http://{closed}"], http2: true, retries: 0 }}
        routes:
          - {{ name: tls, match: {{ path: /, headers: {{ x-up: tls }} }}, upstream: tls, timeout: 1s }}
          - {{ name: dead, match: {{ path: /, headers: {{ x-up: dead }} }}, upstream: dead }}
          - name: limited
            match: {{ path: /test.Limited }}
            upstream: h2c
            limits: [{{ algorithm: fixed_window, limit: 2, window: 1h, key: client_ip }}]
          - {{ name: grpc, match: {{ path: /test.Echo }}, upstream: h2c, timeout: 1s }}
        "#,
        h2c = h2c.addr,
        tls = tls.addr,
        ca = pki.ca().display(),
        closed = closed.addr(),
    );
    let gw = Gateway::start(&config_with_server(&server, &rest)).await;
    Setup {
        pki,
        gw,
        _h2c: h2c,
        _tls: tls,
        _closed: closed,
    }
}

impl Setup {
    /// A gRPC channel to the gateway's plain listener (h2c).
    async fn h2c(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.gw.addr()))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// A gRPC channel to the gateway's TLS listener, verifying `gw.test`
    /// against the test CA.
    async fn tls(&self) -> Channel {
        let addr = self.gw.bound_addr(TLS_LISTEN.parse().unwrap());
        let ca = std::fs::read(self.pki.ca()).unwrap();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .domain_name("gw.test");
        Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap()
    }
}

/// A unary call of `method` with `metadata` and an optional deadline.
async fn unary(
    channel: &Channel,
    method: &'static str,
    ping: Ping,
    metadata: &[(&'static str, &'static str)],
    timeout: Option<Duration>,
) -> Result<tonic::Response<Pong>, Status> {
    let mut client = tonic::client::Grpc::new(channel.clone());
    client.ready().await.unwrap();
    let mut request = tonic::Request::new(ping);
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    client
        .unary(
            request,
            PathAndQuery::from_static(method),
            ProstCodec::<Ping, Pong>::default(),
        )
        .await
}

fn ping(text: &str) -> Ping {
    Ping {
        text: text.to_owned(),
        delay_ms: 0,
    }
}

fn metadata(response: &tonic::Response<Pong>, name: &str) -> Option<String> {
    response
        .metadata()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_over_h2c_and_tls_both_sides() {
    let s = setup("").await;
    let h2c = s.h2c().await;
    let tls = s.tls().await;
    // (client leg, upstream leg, forwarded proto)
    let cases = [
        (&h2c, &[][..], "http"),
        (&h2c, &[("x-up", "tls")][..], "http"),
        (&tls, &[][..], "https"),
        (&tls, &[("x-up", "tls")][..], "https"),
    ];
    for (i, (channel, md, proto)) in cases.into_iter().enumerate() {
        let text = format!("hello {i}");
        let r = unary(channel, "/test.Echo/Unary", ping(&text), md, None)
            .await
            .unwrap_or_else(|e| panic!("case {i}: {e:?}"));
        // The trailing metadata arrives (merged into the response's).
        assert_eq!(
            metadata(&r, SERVER_TRAILER.0).as_deref(),
            Some(SERVER_TRAILER.1),
            "case {i}"
        );
        let pong = r.into_inner();
        assert_eq!(pong.text, text, "case {i}");
        assert_eq!(pong.forwarded_proto, proto, "case {i}");
    }
    // Many calls multiplexed on one client connection, in parallel.
    let calls = (0..50).map(|i| {
        let channel = tls.clone();
        async move {
            let md: &[(&str, &str)] = if i % 2 == 0 { &[("x-up", "tls")] } else { &[] };
            let r = unary(
                &channel,
                "/test.Echo/Unary",
                ping(&format!("n{i}")),
                md,
                None,
            )
            .await;
            r.unwrap().into_inner().text
        }
    });
    let texts = futures_util::future::join_all(calls).await;
    assert_eq!(texts, (0..50).map(|i| format!("n{i}")).collect::<Vec<_>>());
}

/// Opens a `Chat` call with `metadata`, its first ping sent before the
/// response head is awaited (which must come while the client's stream is
/// still open); the sender for more pings and the stream of pongs.
async fn open_chat(
    channel: &Channel,
    metadata: &[(&'static str, &'static str)],
    first: &str,
) -> (mpsc::Sender<Ping>, Streaming<Pong>) {
    let (tx, mut rx) = mpsc::channel::<Ping>(1);
    let outbound = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut client = tonic::client::Grpc::new(channel.clone());
    client.ready().await.unwrap();
    let mut request = tonic::Request::new(outbound);
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    tx.send(ping(first)).await.unwrap();
    let response = tokio::time::timeout(
        Duration::from_secs(5),
        client.streaming(
            request,
            PathAndQuery::from_static("/test.Echo/Chat"),
            ProstCodec::<Ping, Pong>::default(),
        ),
    )
    .await
    .expect("the response head comes before the client's stream ends")
    .unwrap();
    (tx, response.into_inner())
}

/// Streams pings one at a time, waiting for each pong before the next:
/// a gateway that buffered either direction would stall here.
async fn chat(channel: &Channel, metadata: &[(&'static str, &'static str)], n: usize) {
    let (tx, mut inbound) = open_chat(channel, metadata, "msg 0").await;
    for i in 0..n {
        if i > 0 {
            tx.send(ping(&format!("msg {i}"))).await.unwrap();
        }
        let pong = tokio::time::timeout(Duration::from_secs(5), inbound.message())
            .await
            .unwrap_or_else(|_| panic!("pong {i} never came: something buffers"))
            .unwrap()
            .expect("a message");
        assert_eq!(pong.text, format!("MSG {i}"));
    }
    drop(tx);
    assert_eq!(inbound.message().await.unwrap(), None, "the stream ends");
    let trailers = inbound.trailers().await.unwrap().expect("trailers");
    assert_eq!(
        trailers.get(SERVER_TRAILER.0).unwrap().to_str().unwrap(),
        SERVER_TRAILER.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_streaming_is_interleaved_and_ends_with_trailers() {
    let s = setup("").await;
    let h2c = s.h2c().await;
    let tls = s.tls().await;
    chat(&h2c, &[], 20).await;
    chat(&tls, &[("x-up", "tls")], 20).await;
    // Streams live longer than the route timeout (1 s): it bounds the wait
    // for the response head, not the call.
    let started = Instant::now();
    let (tx, mut inbound) = open_chat(&h2c, &[], "a").await;
    assert_eq!(inbound.message().await.unwrap().unwrap().text, "A");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tx.send(ping("b")).await.unwrap();
    assert_eq!(inbound.message().await.unwrap().unwrap().text, "B");
    drop(tx);
    assert_eq!(inbound.message().await.unwrap(), None);
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_with_a_body_cap_still_streams_and_the_cap_holds() {
    // `max_body_bytes` with a gRPC stream (no Content-Length): enforced as
    // the bytes pass, not by reading the whole stream first (which would
    // wait for a client that waits for its answers).
    let s = setup("max_body_bytes: 4KiB").await;
    let h2c = s.h2c().await;
    chat(&h2c, &[], 10).await;

    // A stream that goes past the cap is cut: the call fails, and does not
    // hang.
    let (tx, mut inbound) = open_chat(&h2c, &[], "first").await;
    assert_eq!(inbound.message().await.unwrap().unwrap().text, "FIRST");
    let big = "x".repeat(1024);
    let outcome = tokio::time::timeout(Duration::from_secs(5), async {
        for _ in 0..8 {
            if tx.send(ping(&big)).await.is_err() {
                break;
            }
            match inbound.message().await {
                Ok(Some(pong)) => assert_eq!(pong.text.len(), 1024),
                other => return other.map(|_| ()),
            }
        }
        Ok(())
    })
    .await
    .expect("the call ends");
    assert!(outcome.is_err(), "a stream past 4 KiB is cut: {outcome:?}");

    // A unary call whose message alone is past the cap: the gateway answers
    // before the upstream sees it (413 -> grpc-status 2 UNKNOWN, gRPC's
    // HTTP-to-gRPC table).
    let err = unary(&h2c, "/test.Echo/Unary", ping(&"y".repeat(8192)), &[], None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unknown, "{err:?}");
    assert!(err.message().contains("payload"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_never_outlives_the_route_timeout() {
    let s = setup("").await;
    let h2c = s.h2c().await;
    // No deadline from the client: the upstream is told the route's 1 s.
    let r = unary(&h2c, "/test.Echo/Unary", ping("a"), &[], None).await;
    assert_eq!(r.unwrap().into_inner().grpc_timeout, "1000m");
    // A longer one is cut to the route's.
    let long = Some(Duration::from_secs(100));
    let r = unary(&h2c, "/test.Echo/Unary", ping("b"), &[], long).await;
    assert_eq!(r.unwrap().into_inner().grpc_timeout, "1000m");
    // A shorter one passes as the client wrote it.
    let short = Some(Duration::from_millis(700));
    let r = unary(&h2c, "/test.Echo/Unary", ping("c"), &[], short).await;
    let seen = r.unwrap().into_inner().grpc_timeout;
    let (digits, unit) = seen.split_at(seen.len() - 1);
    let nanos_per_unit: u64 = match unit {
        "n" => 1,
        "u" => 1_000,
        "m" => 1_000_000,
        "S" => 1_000_000_000,
        other => panic!("unit {other} in {seen}"),
    };
    let told = Duration::from_nanos(digits.parse::<u64>().unwrap() * nanos_per_unit);
    assert!(
        told <= Duration::from_millis(700) && told > Duration::from_millis(500),
        "{seen}"
    );

    // An upstream slower than the route timeout: DEADLINE_EXCEEDED from the
    // gateway after about 1 s, over h2c and TLS upstreams alike.
    for md in [&[][..], &[("x-up", "tls")][..]] {
        let slow = Ping {
            text: "slow".into(),
            delay_ms: 3000,
        };
        let started = Instant::now();
        let err = unary(&h2c, "/test.Echo/Unary", slow, md, None)
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
            "{took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_errors_reach_the_client_as_grpc_status() {
    let s = setup("").await;
    for channel in [s.h2c().await, s.tls().await] {
        // No route: UNIMPLEMENTED (404 -> 12).
        let err = unary(&channel, "/other.Svc/Call", ping("x"), &[], None)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
        // An upstream that refuses connections: UNAVAILABLE (502 -> 14).
        let err = unary(
            &channel,
            "/test.Echo/Unary",
            ping("x"),
            &[("x-up", "dead")],
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    }
    // Rate limited: RESOURCE_EXHAUSTED, after exactly the limit's 2 calls.
    // (The upstream does not serve /test.Limited/: UNIMPLEMENTED from it.)
    let h2c = s.h2c().await;
    let mut codes = Vec::new();
    for _ in 0..4 {
        let err = unary(&h2c, "/test.Limited/Call", ping("x"), &[], None)
            .await
            .unwrap_err();
        codes.push(err.code());
    }
    assert_eq!(
        codes,
        [
            Code::Unimplemented,
            Code::Unimplemented,
            Code::ResourceExhausted,
            Code::ResourceExhausted
        ]
    );
    // The upstream's own Trailers-Only error passes with its metadata.
    let err = unary(&h2c, "/test.Echo/Deny", ping("x"), &[], None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(err.message(), "not for you");
    assert_eq!(
        err.metadata().get("x-reason").unwrap().to_str().unwrap(),
        "test-policy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_reach_a_grpc_upstream() {
    // gRPC clients rarely send request trailers, but HTTP/2 allows them and
    // the gateway passes them: a hand-built call over h2c.
    let s = setup("").await;
    let tcp = tokio::net::TcpStream::connect(s.gw.addr()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    for md in [&[][..], &[("x-up", "tls")][..]] {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", HeaderValue::from_static("abc123"));
        let frames = futures_util::stream::iter([
            Ok::<_, Infallible>(Frame::data(frame_message(&ping("with trailers")))),
            Ok(Frame::trailers(trailers)),
        ]);
        let mut req = Request::post(format!("http://{}/test.Echo/Trailers", s.gw.addr()))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in md {
            req = req.header(*k, *v);
        }
        let resp = sender
            .send_request(req.body(StreamBody::new(frames)).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let collected = resp.into_body().collect().await.unwrap();
        assert_eq!(
            collected.trailers().unwrap().get("grpc-status").unwrap(),
            "0"
        );
        let pong: Pong = unframe(collected.to_bytes());
        assert_eq!(pong.text, "with trailers");
        assert_eq!(pong.request_trailers, "x-checksum=abc123", "{md:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_reaches_a_grpc_upstream_with_the_gateways_span() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let s = setup("").await;
    let h2c = s.h2c().await;
    let r = unary(
        &h2c,
        "/test.Echo/Unary",
        ping("traced"),
        &[("traceparent", SENT)],
        None,
    )
    .await
    .unwrap();
    let seen = metadata(&r, "x-seen-traceparent").expect("the upstream saw a traceparent");
    let f: Vec<&str> = seen.split('-').collect();
    assert_eq!(f.len(), 4, "{seen}");
    assert_eq!((f[0], f[1], f[3]), ("00", TRACE, "01"), "{seen}");
    assert_eq!(f[2].len(), 16, "{seen}");
    assert_ne!(f[2], "00f067aa0ba902b7", "the gateway's span is the parent");
    // None sent: one started, with the same shape.
    let r = unary(&h2c, "/test.Echo/Unary", ping("untraced"), &[], None)
        .await
        .unwrap();
    let seen = metadata(&r, "x-seen-traceparent").expect("a trace was started");
    let f: Vec<&str> = seen.split('-').collect();
    assert_eq!(
        (f.len(), f[0], f[1].len(), f[2].len(), f[3]),
        (4, "00", 32, 16, "00")
    );
}
