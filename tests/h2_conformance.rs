//! HTTP/2 and proxying conformance (docs/protocols.md), the cases an outside
//! conformance run found: a HEAD answered by the gateway carries no body on
//! HTTP/2 (curl `-I --http2-prior-knowledge`), `cookie` crumbs joined for an
//! HTTP/1.1 upstream, request trailers reaching an HTTP/1.1 upstream
//! undeclared, a pseudo-header in trailers as a stream error and a request
//! with neither `:authority` nor Host as a 400 (both with raw HTTP/2
//! frames), an HTTP/1.0 upstream behind a keep-alive HTTP/1.1 client, and
//! `rewrite_location` with `python3 -m http.server` behind a stripped
//! prefix. Then RFC 9113 / RFC 7541 error handling with raw frames (README
//! "HTTP/2 conformance", vendor/README.md): the error code and frame for
//! HPACK errors, frame sizes and flow control, and malformed requests reset
//! with the connection kept and its HPACK table in step.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use common::client::{self, Resp};
use common::upstream::FramesBody;
use common::{config, raw, Echo, Gateway, OneRoute};
use http::{HeaderMap, HeaderValue, Method, Response};
use http_body::Frame;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// HEAD answered by the gateway itself

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_answered_by_the_gateway_has_no_body_on_any_protocol() {
    let echo = Echo::start("e").await;
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          e: {{ targets: ["{}"] }}
        routes:
          - name: hello
            match: {{ exact: /hello }}
            respond: {{ status: 200, body: "hello\n", headers: {{ content-type: text/plain }} }}
          - name: once
            match: {{ exact: /once }}
            respond: {{ status: 200, body: "ok\n" }}
            limits: [{{ algorithm: fixed_window, limit: 1, window: 1h, key: "header:x-who" }}]
          - name: proxied
            match: {{ path: /proxied }}
            upstream: e
        "#,
        echo.url()
    )))
    .await;
    let addr = gw.addr();

    // hyper's h2 client: every answer without a body, the GET's length.
    let h2 = client::h2c();
    let head = |path: &str, who: &str| {
        client::req(Method::HEAD, addr, path)
            .header("x-who", who)
            .body(client::empty())
            .unwrap()
    };
    let r = client::send(&h2, head("/hello", "a")).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (200, 0), "{r:?}");
    assert_eq!(r.header("content-length"), Some("6"), "the GET's length");
    let r = client::send(&h2, head("/nothing", "a")).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (404, 0), "{r:?}");
    let r = client::send(&h2, head("/once", "h2")).await;
    assert_eq!(r.status, 200);
    let r = client::send(&h2, head("/once", "h2")).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (429, 0), "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");

    // curl, the client the conformance run used: it fails the transfer
    // (PROTOCOL_ERROR) when DATA follows a HEAD's answer.
    for (path, who, status) in [
        ("/hello", "c", "200"),
        ("/nothing", "c", "404"),
        ("/once", "curl", "200"),
        ("/once", "curl", "429"),
        ("/proxied/x", "c", "200"),
    ] {
        let url = format!("http://{addr}{path}");
        let out = tokio::process::Command::from(common::reaper::command("curl"))
            .args(["-sS", "-I", "--http2-prior-knowledge", "-m", "5"])
            .args(["-H", &format!("x-who: {who}"), &url])
            .output()
            .await
            .expect("curl (tests/run installs it)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "curl -I {path}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.starts_with(&format!("HTTP/2 {status}")),
            "{path}: {text}"
        );
    }

    // HTTP/1.1: the HEAD's answer has no body, so the next request on the
    // connection is read as a request, not as body.
    let mut conn = raw::connect(addr).await;
    conn.write(b"HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let head_answer = read_head_only(&mut conn).await;
    assert!(head_answer.starts_with("HTTP/1.1 200"), "{head_answer}");
    let r = conn.read_response(WAIT).await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "hello\n"));
}

/// Reads one response head (to the blank line) and nothing more.
async fn read_head_only(conn: &mut raw::RawConn) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, conn.stream.read(&mut byte))
            .await
            .expect("a response head in time")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

// ---------------------------------------------------------------------------
// HTTP/2 client, HTTP/1.1 upstream: cookies and trailers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_crumbs_from_an_h2_client_reach_an_http1_upstream_joined() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("all").upstream(&echo).start().await;
    let r = client::send(
        &client::h2c(),
        client::req(Method::GET, gw.addr(), "/c")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("cookie", "session=xyz")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = echo.last().unwrap();
    assert_eq!(seen.version, "HTTP/1.1");
    assert_eq!(seen.header_all("cookie"), ["a=1; b=2; session=xyz"]);
}

/// The trailers the echo upstream read after the body.
fn upstream_trailers(r: &Resp) -> serde_json::Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["trailers"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_reach_an_http1_upstream_undeclared() {
    let echo = Echo::start("e").await;
    // Streamed (no body cap) and read whole first (`max_body_bytes`).
    for server_extra in ["", "max_body_bytes: 100000"] {
        let gw = OneRoute::new()
            .named("all")
            .upstream(&echo)
            .server(server_extra)
            .start()
            .await;
        let what = format!("server: {{{server_extra}}}");

        // From an HTTP/2 client, which never declares them.
        let mut t = HeaderMap::new();
        t.insert("x-req-trailer", HeaderValue::from_static("done"));
        let body = FramesBody::new(vec![
            Frame::data(Bytes::from_static(b"part one,")),
            Frame::data(Bytes::from_static(b"part two")),
            Frame::trailers(t),
        ]);
        let r = client::send(
            &client::h2c(),
            client::req(Method::POST, gw.addr(), "/h2")
                .body(client::boxed(body))
                .unwrap(),
        )
        .await;
        assert_eq!(
            upstream_trailers(&r),
            serde_json::json!([["x-req-trailer", "done"]]),
            "h2 client, {what}"
        );
        assert_eq!(r.json()["body_len"], 17);
        assert_eq!(r.json()["http_version"], "HTTP/1.1");

        // From an HTTP/1.1 client that did not declare them in `Trailer`.
        let r = raw::request(
            gw.addr(),
            b"POST /h1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
              5\r\nhello\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.json()["trailers"],
            serde_json::json!([["x-checksum", "abc"], ["x-other", "1"]]),
            "HTTP/1.1 client, {what}"
        );
        assert_eq!(r.json()["body_len"], 5);

        // Trailers that come well after the head went upstream.
        let (tx, body) = ChannelBody::new();
        let req = client::req(Method::POST, gw.addr(), "/late")
            .body(client::boxed(body))
            .unwrap();
        let send = tokio::spawn(async move { client::try_send(&client::h2c(), req).await });
        tx.send(Frame::data(Bytes::from_static(b"early")))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut t = HeaderMap::new();
        t.insert("x-late", HeaderValue::from_static("yes"));
        tx.send(Frame::trailers(t)).await.unwrap();
        drop(tx);
        let r = send.await.unwrap().unwrap();
        assert_eq!(
            upstream_trailers(&r),
            serde_json::json!([["x-late", "yes"]]),
            "late trailers, {what}"
        );
    }
}

/// A request body fed frame by frame through a channel.
struct ChannelBody(tokio::sync::mpsc::Receiver<Frame<Bytes>>);

impl ChannelBody {
    fn new() -> (tokio::sync::mpsc::Sender<Frame<Bytes>>, ChannelBody) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        (tx, ChannelBody(rx))
    }
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = common::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

// ---------------------------------------------------------------------------
// Raw HTTP/2 frames

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;
const ACK: u8 = 0x1;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const FRAME_SIZE_ERROR: u32 = 0x6;
const COMPRESSION_ERROR: u32 = 0x9;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
/// 2^31 - 1, the largest flow-control window (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// An HTTP/2 connection spoken frame by frame (prior knowledge, h2c).
struct H2 {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The gateway's SETTINGS, once read: (identifier, value).
    settings: Option<Vec<(u16, u32)>>,
}

/// How the gateway answered one stream.
#[derive(Debug, PartialEq)]
enum Answer {
    /// A response HEADERS frame with this `:status`.
    Status(u16),
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code.
    GoAway(u32),
    Closed,
}

/// HPACK representations (RFC 7541 §6), for field blocks built byte by
/// byte; every name and value under 127 bytes, sent as text.
mod hp {
    /// A literal field never indexed, its name as text (§6.2.3).
    pub fn lit(name: &str, value: &str) -> Vec<u8> {
        rep(0x10, name, value)
    }

    /// A literal field with incremental indexing, its name as text
    /// (§6.2.1): the decoder adds it to its dynamic table, at index 62.
    pub fn add(name: &str, value: &str) -> Vec<u8> {
        rep(0x40, name, value)
    }

    /// An indexed field (§6.1), `index` under 127.
    pub fn idx(index: u8) -> Vec<u8> {
        assert!(index < 127);
        vec![0x80 | index]
    }

    fn rep(first: u8, name: &str, value: &str) -> Vec<u8> {
        let mut rep = vec![first];
        for s in [name, value] {
            assert!(s.len() < 127);
            rep.push(s.len() as u8);
            rep.extend_from_slice(s.as_bytes());
        }
        rep
    }

    /// The request pseudo-header fields of `method path`, `:authority: x`.
    pub fn request(method: &str, path: &str) -> Vec<u8> {
        [
            lit(":method", method),
            lit(":scheme", "http"),
            lit(":path", path),
            lit(":authority", "x"),
        ]
        .concat()
    }
}

/// An HPACK block of literal fields, never indexed (see [`hp::lit`]).
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    fields.iter().flat_map(|(n, v)| hp::lit(n, v)).collect()
}

/// A response's `:status`, from the first field of its HPACK block: the
/// gateway's encoder (h2) sends the statuses of the static table (RFC 7541
/// Appendix A, entries 8 to 14) as one indexed byte.
fn status_of(block: &[u8]) -> u16 {
    const STATIC: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
    match block.first() {
        Some(&b) if (0x88..=0x8e).contains(&b) => STATIC[usize::from(b - 0x88)],
        _ => panic!("a :status this test does not decode: {block:02x?}"),
    }
}

/// The error code at `at` in a RST_STREAM or GOAWAY payload.
fn code_at(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

impl H2 {
    async fn open(addr: SocketAddr) -> H2 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut h2 = H2 {
            stream,
            buf: Vec::new(),
            settings: None,
        };
        h2.send(SETTINGS, 0, 0, &[]).await;
        h2
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend([kind, flags]);
        frame.extend(stream.to_be_bytes());
        frame.extend_from_slice(payload);
        // The gateway may close first: the answer tells.
        self.stream.write_all(&frame).await.ok();
    }

    /// HEADERS with `block`, END_HEADERS, and END_STREAM if `end`.
    async fn headers(&mut self, stream: u32, end: bool, block: &[u8]) {
        let flags = END_HEADERS | if end { END_STREAM } else { 0 };
        self.send(HEADERS, flags, stream, block).await;
    }

    /// The next frame: (type, flags, stream, payload); `None` once closed.
    async fn frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        self.frame_within(WAIT)
            .await
            .expect("the gateway answered in time")
    }

    /// The next frame if one comes within `wait`.
    async fn frame_within(&mut self, wait: Duration) -> Result<Option<(u8, u8, u32, Vec<u8>)>, ()> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9).collect();
                    let payload: Vec<u8> = self.buf.drain(..len).collect();
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & !(1 << 31);
                    if head[3] == SETTINGS && head[4] & ACK == 0 {
                        // Acknowledged at once, and remembered.
                        self.send(SETTINGS, ACK, 0, &[]).await;
                        let settings = payload
                            .chunks(6)
                            .map(|s| {
                                let id = u16::from_be_bytes([s[0], s[1]]);
                                (id, u32::from_be_bytes(s[2..6].try_into().unwrap()))
                            })
                            .collect();
                        self.settings = Some(settings);
                    }
                    return Ok(Some((head[3], head[4], stream, payload)));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .map_err(|_| ())?
                .unwrap_or(0);
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads frames until `stream` is answered (or the connection is).
    async fn answer(&mut self, stream: u32) -> Answer {
        loop {
            let Some((kind, _, id, payload)) = self.frame().await else {
                return Answer::Closed;
            };
            match kind {
                GOAWAY => return Answer::GoAway(code_at(&payload, 4)),
                HEADERS if id == stream => return Answer::Status(status_of(&payload)),
                RST_STREAM if id == stream => return Answer::Reset(code_at(&payload, 0)),
                _ => {}
            }
        }
    }

    /// A connection error: GOAWAY with `code`, then the gateway closes.
    async fn expect_goaway(&mut self, code: u32, what: &str) {
        assert_eq!(self.answer(0).await, Answer::GoAway(code), "{what}");
        while self.frame().await.is_some() {}
    }

    /// The gateway's SETTINGS value for `id`, reading frames until they came.
    async fn setting(&mut self, id: u16) -> Option<u32> {
        while self.settings.is_none() {
            self.frame().await.expect("the gateway's SETTINGS");
        }
        let settings = self.settings.as_ref().unwrap();
        settings
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| *v)
    }

    /// A stream error, then the connection still serves: `GET /after` on
    /// `next` is answered 200 by the upstream.
    async fn reset_then_served(&mut self, stream: u32, code: u32, next: u32, what: &str) {
        assert_eq!(self.answer(stream).await, Answer::Reset(code), "{what}");
        self.headers(next, true, &hp::request("GET", "/after"))
            .await;
        assert_eq!(
            self.answer(next).await,
            Answer::Status(200),
            "{what}: the next stream on the connection"
        );
    }
}

/// Request pseudo-header fields for `method path`, with `:authority: x`.
fn request(method: &'static str, path: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "x"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_request_without_authority_or_host_is_a_400() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("all").upstream(&echo).start().await;
    let mut h2 = H2::open(gw.addr()).await;
    let fields = [(":method", "GET"), (":scheme", "http"), (":path", "/none")];
    h2.send(HEADERS, END_HEADERS | END_STREAM, 1, &hpack(&fields))
        .await;
    assert_eq!(h2.answer(1).await, Answer::Status(400));
    // The same connection, with a Host field, then with :authority.
    let with_host = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/host"),
        ("host", "x"),
    ];
    h2.send(HEADERS, END_HEADERS | END_STREAM, 3, &hpack(&with_host))
        .await;
    assert_eq!(h2.answer(3).await, Answer::Status(200));
    h2.send(
        HEADERS,
        END_HEADERS | END_STREAM,
        5,
        &hpack(&request("GET", "/authority")),
    )
    .await;
    assert_eq!(h2.answer(5).await, Answer::Status(200));
    let paths: Vec<String> = echo.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        ["/host", "/authority"],
        "the 400 reached no upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pseudo_header_in_trailers_is_a_stream_error() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("all").upstream(&echo).start().await;
    let mut h2 = H2::open(gw.addr()).await;
    h2.send(HEADERS, END_HEADERS, 1, &hpack(&request("POST", "/bad")))
        .await;
    h2.send(DATA, 0, 1, b"abc").await;
    let trailers = hpack(&[(":path", "/admin"), ("x-sum", "1")]);
    h2.send(HEADERS, END_HEADERS | END_STREAM, 1, &trailers)
        .await;
    assert_eq!(h2.answer(1).await, Answer::Reset(PROTOCOL_ERROR));

    // A stream error, not a connection error: the connection serves on,
    // and the same request with a regular trailer goes through.
    h2.send(HEADERS, END_HEADERS, 3, &hpack(&request("POST", "/good")))
        .await;
    h2.send(DATA, 0, 3, b"abc").await;
    h2.send(
        HEADERS,
        END_HEADERS | END_STREAM,
        3,
        &hpack(&[("x-sum", "1")]),
    )
    .await;
    assert_eq!(h2.answer(3).await, Answer::Status(200));
    // Only the good request's body reached the upstream whole.
    assert_eq!(echo.completed(), 1, "{:?}", echo.requests());
}

// ---------------------------------------------------------------------------
// HTTP/2 conformance: error codes and malformed requests (RFC 9113, RFC
// 7541). Each case on a fresh connection to a gateway in front of an
// HTTP/1.1 echo upstream; a stream error is followed by a request on the
// same connection, which must be served.

/// A gateway in front of an echo upstream, and a raw connection to it.
async fn raw_h2() -> (Echo, Gateway, H2) {
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("all").upstream(&echo).start().await;
    let h2 = H2::open(gw.addr()).await;
    (echo, gw, h2)
}

// -- HPACK decoding errors: connection error COMPRESSION_ERROR (RFC 9113
// §4.3, "a decoding error in a field block MUST be treated as a connection
// error of type COMPRESSION_ERROR").

/// Sends `block` as a request's field block after the request's pseudo
/// fields, on a fresh connection, and expects GOAWAY COMPRESSION_ERROR.
async fn expect_compression_error(what: &str, tail: &[u8]) {
    let (_echo, _gw, mut h2) = raw_h2().await;
    let block = [hp::request("GET", "/x"), tail.to_vec()].concat();
    h2.headers(1, true, &block).await;
    h2.expect_goaway(COMPRESSION_ERROR, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_invalid_index_is_a_compression_error() {
    // Index 0, and 62: the first dynamic entry, of an empty table (§2.3.3).
    expect_compression_error("index 0", &hp::idx(0)).await;
    expect_compression_error("index 62, table empty", &hp::idx(62)).await;
    // A literal whose name refers to a missing entry (§6.2.1: 0x40 | 70).
    expect_compression_error("name index 70", &[0x40 | 0x3f, 70 - 63, 1, b'v']).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_bad_huffman_is_a_compression_error() {
    // §5.2: a string with the EOS symbol, and padding longer than 7 bits
    // ('a' is 00011, then 11 bits of 1s).
    let eos = [0x10, 1, b'x', 0x80 | 4, 0xff, 0xff, 0xff, 0xff];
    expect_compression_error("EOS in a Huffman string", &eos).await;
    let padding = [0x10, 1, b'x', 0x80 | 2, 0b0001_1111, 0xff];
    expect_compression_error("Huffman padding over 7 bits", &padding).await;
    // Padding that is not the most significant bits of EOS (zeros).
    let zeros = [0x10, 1, b'x', 0x80 | 1, 0b0001_1000];
    expect_compression_error("Huffman padding of zeros", &zeros).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_integer_overflow_is_a_compression_error() {
    // §5.1: an index whose continuation bytes never end within any sane
    // length, and a string length of the same kind.
    let index = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    expect_compression_error("index overflow", &index).await;
    let length = [0x10, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    expect_compression_error("string length overflow", &length).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_table_size_update_over_the_limit_is_a_compression_error() {
    // §6.3 and §4.2: 4097 > SETTINGS_HEADER_TABLE_SIZE (4096, the default).
    let (_echo, _gw, mut h2) = raw_h2().await;
    let block = [vec![0x3f, 0xe2, 0x1f], hp::request("GET", "/x")].concat();
    h2.headers(1, true, &block).await;
    h2.expect_goaway(COMPRESSION_ERROR, "size update to 4097")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_table_size_update_after_a_field_is_a_compression_error() {
    // §4.2: an update MUST come at the beginning of the block.
    expect_compression_error("size update after a field", &[0x20]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpack_truncated_block_is_a_compression_error() {
    // A block that ends inside a representation (h2spec 4.3 case 1: a
    // literal with incremental indexing and nothing after it), and a
    // string longer than what is left.
    expect_compression_error("0x40 alone", &[0x40]).await;
    expect_compression_error("string past the end", &[0x10, 1, b'x', 5, b'v']).await;
}

// -- Frame sizes: FRAME_SIZE_ERROR (RFC 9113 §4.2 and each frame's section).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_over_max_frame_size_are_a_frame_size_error() {
    for kind in [DATA, HEADERS] {
        let (_echo, _gw, mut h2) = raw_h2().await;
        let max = h2.setting(SETTINGS_MAX_FRAME_SIZE).await.unwrap_or(16384) as usize;
        if kind == DATA {
            h2.headers(1, false, &hp::request("POST", "/x")).await;
            h2.send(DATA, END_STREAM, 1, &vec![b'a'; max + 1]).await;
        } else {
            // Enough fields to make a block of max + 1 bytes.
            let mut block = hp::request("GET", "/x");
            while block.len() < max + 1 {
                block.extend(hp::lit("x-pad", &"p".repeat(100)));
            }
            block.truncate(max + 1);
            h2.headers(1, true, &block).await;
        }
        h2.expect_goaway(FRAME_SIZE_ERROR, &format!("frame type {kind}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_of_7_bytes_is_a_frame_size_error() {
    // §6.7: "a length field value other than 8", connection error.
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.send(PING, 0, 0, &[0; 7]).await;
    h2.expect_goaway(FRAME_SIZE_ERROR, "PING of 7").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_of_4_bytes_is_a_stream_frame_size_error() {
    // §6.3: "a length other than 5 octets MUST be treated as a stream
    // error of type FRAME_SIZE_ERROR".
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.headers(1, false, &hp::request("POST", "/x")).await;
    h2.send(PRIORITY, 0, 1, &[0x80, 0, 0, 1]).await;
    h2.reset_then_served(1, FRAME_SIZE_ERROR, 3, "PRIORITY of 4")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rst_stream_of_3_bytes_is_a_frame_size_error() {
    // §6.4: a connection error.
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.headers(1, false, &hp::request("POST", "/x")).await;
    h2.send(RST_STREAM, 0, 1, &[0, 0, 8]).await;
    h2.expect_goaway(FRAME_SIZE_ERROR, "RST_STREAM of 3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_update_of_3_bytes_is_a_frame_size_error() {
    // §6.9: a connection error, on the connection and on a stream.
    for stream in [0, 1] {
        let (_echo, _gw, mut h2) = raw_h2().await;
        h2.headers(1, false, &hp::request("POST", "/x")).await;
        h2.send(WINDOW_UPDATE, 0, stream, &[0, 0, 1]).await;
        h2.expect_goaway(FRAME_SIZE_ERROR, &format!("WINDOW_UPDATE of 3 on {stream}"))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_of_wrong_length_are_a_frame_size_error() {
    // §6.5: an ACK with a payload, and a length that is not a multiple of 6.
    for (what, flags, payload) in [
        (
            "SETTINGS ACK with 6 bytes",
            ACK,
            &[0, 4, 0, 0, 0xff, 0xff][..],
        ),
        ("SETTINGS of 5 bytes", 0, &[0, 4, 0, 0, 0xff][..]),
    ] {
        let (_echo, _gw, mut h2) = raw_h2().await;
        h2.setting(SETTINGS_MAX_FRAME_SIZE).await;
        h2.send(SETTINGS, flags, 0, payload).await;
        h2.expect_goaway(FRAME_SIZE_ERROR, what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_too_short_for_their_fields_are_a_frame_size_error() {
    // §4.2: "too small to contain mandatory frame data"; a connection
    // error for frames that carry a field block, SETTINGS or stream 0.
    let cases: [(&str, u8, u8, u32, &[u8]); 4] = [
        ("GOAWAY of 7 bytes", GOAWAY, 0, 0, &[0; 7]),
        (
            "HEADERS PADDED of 0 bytes",
            HEADERS,
            PADDED | END_HEADERS,
            1,
            &[],
        ),
        (
            "HEADERS PRIORITY of 3 bytes",
            HEADERS,
            PRIORITY_FLAG | END_HEADERS,
            1,
            &[0, 0, 0],
        ),
        ("DATA PADDED of 0 bytes", DATA, PADDED, 1, &[]),
    ];
    for (what, kind, flags, stream, payload) in cases {
        let (_echo, _gw, mut h2) = raw_h2().await;
        if kind == DATA {
            h2.headers(1, false, &hp::request("POST", "/x")).await;
        }
        h2.send(kind, flags, stream, payload).await;
        h2.expect_goaway(FRAME_SIZE_ERROR, what).await;
    }
}

// -- Flow control: FLOW_CONTROL_ERROR (RFC 9113 §6.9).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_update_past_2_31_on_the_connection_is_a_flow_control_error() {
    // §6.9.1: the connection window is 65,535 + 2^31 - 1 after this.
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.send(WINDOW_UPDATE, 0, 0, &MAX_WINDOW.to_be_bytes())
        .await;
    h2.expect_goaway(FLOW_CONTROL_ERROR, "connection window")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_update_past_2_31_on_a_stream_is_a_stream_flow_control_error() {
    // §6.9.1: "for streams, the sender sends a RST_STREAM with an error
    // code of FLOW_CONTROL_ERROR".
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.headers(1, false, &hp::request("POST", "/x")).await;
    h2.send(WINDOW_UPDATE, 0, 1, &MAX_WINDOW.to_be_bytes())
        .await;
    h2.reset_then_served(1, FLOW_CONTROL_ERROR, 3, "stream window")
        .await;
}

/// A SETTINGS payload with one setting.
fn setting(id: u16, value: u32) -> Vec<u8> {
    [id.to_be_bytes().to_vec(), value.to_be_bytes().to_vec()].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_window_size_over_2_31_is_a_flow_control_error() {
    // §6.5.2: "values above the maximum flow-control window size of
    // 2^31-1 MUST be treated as a connection error of type
    // FLOW_CONTROL_ERROR".
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.send(
        SETTINGS,
        0,
        0,
        &setting(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 31),
    )
    .await;
    h2.expect_goaway(FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE 2^31")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_window_size_change_overflowing_a_stream_is_a_flow_control_error() {
    // §6.9.2: a change "that causes any flow-control window to exceed the
    // maximum size" is a connection error FLOW_CONTROL_ERROR. Stream 1's
    // window is brought to 2^31 - 1, then the initial size grows by 1.
    let (_echo, _gw, mut h2) = raw_h2().await;
    h2.headers(1, false, &hp::request("POST", "/x")).await;
    h2.send(WINDOW_UPDATE, 0, 1, &(MAX_WINDOW - 65_535).to_be_bytes())
        .await;
    h2.send(
        SETTINGS,
        0,
        0,
        &setting(SETTINGS_INITIAL_WINDOW_SIZE, 65_536),
    )
    .await;
    h2.expect_goaway(FLOW_CONTROL_ERROR, "stream window past 2^31 - 1")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_beyond_the_window_is_a_flow_control_error() {
    // §6.9.1: a sender MUST NOT exceed the window; the receiver answers
    // FLOW_CONTROL_ERROR, on the stream or the connection, whichever
    // window was overrun (the stream's, measured: the gateway took 5 MB,
    // its socket buffers and the stream window, and the connection window
    // still had 300 KB). The upstream never reads, so once the gateway's
    // buffers are full its windows stay shut.
    let upstream = common::upstream::black_hole().await;
    let gw = OneRoute::new()
        .upstream_at("hole", &format!("[\"http://{upstream}\"]"))
        .named("after")
        .matching("{ exact: /after }")
        .respond("{ status: 200 }")
        .route("{ name: all, match: { path: / }, upstream: hole }")
        .start()
        .await;
    let mut h2 = H2::open(gw.addr()).await;
    let max = h2.setting(SETTINGS_MAX_FRAME_SIZE).await.unwrap_or(16384) as usize;
    let mut stream_window = i64::from(
        h2.setting(SETTINGS_INITIAL_WINDOW_SIZE)
            .await
            .unwrap_or(65_535),
    );
    let mut conn_window: i64 = 65_535;
    h2.headers(1, false, &hp::request("POST", "/upload")).await;
    let chunk = vec![b'a'; max];
    let mut sent = 0usize;
    loop {
        // Take in the window updates that came, waiting a while once a
        // window looks shut.
        let shut = stream_window.min(conn_window) <= 0;
        let wait = Duration::from_millis(if shut { 1000 } else { 1 });
        match h2.frame_within(wait).await {
            Ok(Some((WINDOW_UPDATE, _, id, payload))) => {
                let inc = i64::from(code_at(&payload, 0));
                if id == 0 {
                    conn_window += inc;
                } else if id == 1 {
                    stream_window += inc;
                }
                continue;
            }
            Ok(Some((kind @ (RST_STREAM | GOAWAY | HEADERS), _, _, _))) => {
                panic!("frame type {kind} after {sent} bytes")
            }
            Ok(Some(_)) => continue,
            Ok(None) => panic!("closed after {sent} bytes"),
            Err(()) if shut => break,
            Err(()) => {}
        }
        let n = (stream_window.min(conn_window).max(0) as usize).min(max);
        if n > 0 {
            h2.send(DATA, 0, 1, &chunk[..n]).await;
            stream_window -= n as i64;
            conn_window -= n as i64;
            sent += n;
        }
        assert!(
            sent < 64 << 20,
            "the gateway took 64 MiB from a stalled upstream"
        );
    }
    // A window is shut and stayed so: one byte more.
    h2.send(DATA, 0, 1, b"!").await;
    let what = format!("after {sent} bytes");
    if conn_window <= 0 {
        h2.expect_goaway(FLOW_CONTROL_ERROR, &what).await;
    } else {
        h2.reset_then_served(1, FLOW_CONTROL_ERROR, 3, &what).await;
    }
}

// -- Malformed requests: stream error PROTOCOL_ERROR (RFC 9113 §8.1.1), the
// connection kept. Malformed fields are sent with incremental indexing
// between two indexed fields, and the next request refers to the dynamic
// table, so a decoder that lost its place (or the entry) shows.

/// Sends, on stream `id`, a request whose fields are: `x-before: 1`
/// (indexed), then `malformed` (with incremental indexing), then
/// `x-after: 2` (indexed), and expects RST_STREAM PROTOCOL_ERROR; then a
/// request on `id + 2` that refers to `x-before` and `x-after` by index
/// reaches the upstream with both.
async fn malformed_field(h2: &mut H2, echo: &Echo, id: u32, malformed: (&str, &str)) {
    let what = format!("{malformed:?}");
    let block = [
        hp::request("GET", "/malformed"),
        hp::add("x-before", "1"),
        hp::add(malformed.0, malformed.1),
        hp::add("x-after", "2"),
    ]
    .concat();
    h2.headers(id, true, &block).await;
    assert_eq!(h2.answer(id).await, Answer::Reset(PROTOCOL_ERROR), "{what}");
    // The table now holds, newest first: x-after (62), the malformed
    // field (63), x-before (64), and what earlier cases added after them.
    let next = id + 2;
    let block = [hp::request("GET", "/after"), hp::idx(64), hp::idx(62)].concat();
    h2.headers(next, true, &block).await;
    assert_eq!(h2.answer(next).await, Answer::Status(200), "{what}: next");
    let seen = echo.last().unwrap();
    assert_eq!(seen.path, "/after", "{what}");
    assert_eq!(
        (seen.header("x-before"), seen.header("x-after")),
        (Some("1".into()), Some("2".into())),
        "{what}: {:?}",
        seen.headers
    );
    assert_eq!(
        echo.count_path("/malformed"),
        0,
        "{what} reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uppercase_or_invalid_field_names_are_a_stream_error() {
    // §8.2.1: uppercase names, and names with characters outside a token
    // (SP, DEL, non-ASCII, a colon inside), are malformed; so is an empty
    // name (§8.2, RFC 9110 §5.1).
    let (echo, _gw, mut h2) = raw_h2().await;
    let mut id = 1;
    for name in ["X-Upper", "x-Mixed", "x a", "x\u{7f}", "x\u{e9}", "x:y", ""] {
        malformed_field(&mut h2, &echo, id, (name, "v")).await;
        id += 4;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_pseudo_headers_are_a_stream_error() {
    // §8.3: "endpoints MUST NOT generate pseudo-header fields other than
    // those defined", and a request with one is malformed (§8.1.1).
    let (echo, _gw, mut h2) = raw_h2().await;
    let mut id = 1;
    for name in [":foo", ":", ":Path"] {
        malformed_field(&mut h2, &echo, id, (name, "v")).await;
        id += 4;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_pseudo_header_in_a_request_is_a_stream_error() {
    // §8.3: ":status" in a request.
    let (echo, _gw, mut h2) = raw_h2().await;
    malformed_field(&mut h2, &echo, 1, (":status", "200")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pseudo_header_after_a_regular_field_or_repeated_is_a_stream_error() {
    // §8.3: "all pseudo-header fields MUST appear in a field block before
    // all regular field lines", and "the same pseudo-header field name
    // MUST NOT appear more than once in a field block".
    let (echo, _gw, mut h2) = raw_h2().await;
    let late = [
        hp::lit(":method", "GET"),
        hp::lit(":scheme", "http"),
        hp::lit("x-regular", "1"),
        hp::lit(":path", "/late"),
        hp::lit(":authority", "x"),
    ]
    .concat();
    h2.headers(1, true, &late).await;
    h2.reset_then_served(1, PROTOCOL_ERROR, 3, "pseudo after regular")
        .await;
    let twice = [hp::request("GET", "/twice"), hp::lit(":path", "/other")].concat();
    h2.headers(5, true, &twice).await;
    h2.reset_then_served(5, PROTOCOL_ERROR, 7, "repeated :path")
        .await;
    let paths: Vec<String> = echo.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/after", "/after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_specific_fields_are_a_stream_error() {
    // §8.2.2: connection-specific fields, and TE other than "trailers".
    let (echo, _gw, mut h2) = raw_h2().await;
    let mut id = 1;
    for field in [
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("te", "gzip"),
        ("te", "trailers, gzip"),
    ] {
        malformed_field(&mut h2, &echo, id, field).await;
        id += 4;
    }
    // TE: trailers is allowed.
    let block = [hp::request("GET", "/te"), hp::lit("te", "trailers")].concat();
    h2.headers(id, true, &block).await;
    assert_eq!(h2.answer(id).await, Answer::Status(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_values_with_leading_or_trailing_whitespace_are_a_stream_error() {
    // §8.2.1: "a field value MUST NOT start or end with an ASCII
    // whitespace character (ASCII SP or HTAB, 0x20 or 0x09)".
    let (echo, _gw, mut h2) = raw_h2().await;
    let mut id = 1;
    for value in [" v", "v ", "\tv", "v\t", " ", "\t"] {
        malformed_field(&mut h2, &echo, id, ("x-space", value)).await;
        id += 4;
    }
    // Inside the value, and an empty value, are fine.
    let block = [
        hp::request("GET", "/inside"),
        hp::lit("x-inside", "a b\tc"),
        hp::lit("x-empty", ""),
    ]
    .concat();
    h2.headers(id, true, &block).await;
    assert_eq!(h2.answer(id).await, Answer::Status(200));
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("x-inside").as_deref(), Some("a b\tc"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_values_with_nul_cr_or_lf_are_a_stream_error() {
    // §8.2.1: "a field value MUST NOT contain the zero value (ASCII NUL,
    // 0x00), line feed (ASCII LF, 0x0a), or carriage return (ASCII CR,
    // 0x0d) at any position".
    let (echo, _gw, mut h2) = raw_h2().await;
    let mut id = 1;
    for value in ["a\0b", "a\rb", "a\nb", "a\r\nx-injected: 1"] {
        malformed_field(&mut h2, &echo, id, ("x-bad", value)).await;
        id += 4;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_field_in_trailers_is_a_stream_error() {
    // The same rules hold for a trailer section (§8.1).
    let (echo, _gw, mut h2) = raw_h2().await;
    h2.headers(1, false, &hp::request("POST", "/bad-trailers"))
        .await;
    h2.send(DATA, 0, 1, b"abc").await;
    let trailers = [hp::add("X-Sum", "1"), hp::add("x-ok", "2")].concat();
    h2.headers(1, true, &trailers).await;
    h2.reset_then_served(1, PROTOCOL_ERROR, 3, "uppercase trailer name")
        .await;
    // x-ok is 62, X-Sum 63.
    let block = [hp::request("GET", "/indexed"), hp::idx(62)].concat();
    h2.headers(5, true, &block).await;
    assert_eq!(h2.answer(5).await, Answer::Status(200));
    assert_eq!(echo.last().unwrap().header("x-ok").as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_field_before_a_continuation_is_a_stream_error() {
    // The block is split in two frames, the split inside a field after
    // the malformed one: the whole block is decoded, then the stream reset.
    let (echo, _gw, mut h2) = raw_h2().await;
    for (id, malformed) in [(1, ("X-Upper", "v")), (5, ("connection", "close"))] {
        let block = [
            hp::request("GET", "/malformed"),
            hp::add(malformed.0, malformed.1),
            hp::add("x-split", "across-frames"),
        ]
        .concat();
        let (first, rest) = block.split_at(block.len() - 4);
        h2.send(HEADERS, END_STREAM, id, first).await;
        h2.send(CONTINUATION, END_HEADERS, id, rest).await;
        let what = format!("{malformed:?}");
        assert_eq!(h2.answer(id).await, Answer::Reset(PROTOCOL_ERROR), "{what}");
        let block = [hp::request("GET", "/after"), hp::idx(62)].concat();
        h2.headers(id + 2, true, &block).await;
        assert_eq!(h2.answer(id + 2).await, Answer::Status(200), "{what}: next");
        let seen = echo.last().unwrap();
        assert_eq!(
            seen.header("x-split").as_deref(),
            Some("across-frames"),
            "{what}"
        );
    }
    assert_eq!(echo.count_path("/malformed"), 0);
}

// ---------------------------------------------------------------------------
// An HTTP/1.0 upstream

/// An upstream that speaks HTTP/1.0 and closes after each response:
/// `/sized` with a Content-Length, anything else delimited by the close.
async fn http10_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line).await.ok();
                let sized = line.starts_with("GET /sized ");
                loop {
                    let mut header = String::new();
                    match reader.read_line(&mut header).await {
                        Ok(n) if n > 0 && header != "\r\n" => {}
                        _ => break,
                    }
                }
                let answer: &[u8] = if sized {
                    b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nsized\n"
                } else {
                    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close\n"
                };
                let mut stream = reader.into_inner();
                stream.write_all(answer).await.ok();
                stream.shutdown().await.ok();
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_upstream_keeps_the_clients_connection_http11_and_open() {
    let upstream = http10_upstream().await;
    let gw = OneRoute::new()
        .named("all")
        .upstream_at("old", &format!("[\"http://{upstream}\"]"))
        .start()
        .await;
    let mut conn = raw::connect(gw.addr()).await;
    for (path, body) in [
        ("/sized", "sized\n"),
        ("/close", "until close\n"),
        ("/sized", "sized\n"),
    ] {
        conn.write(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = conn.read_response(WAIT).await.unwrap();
        assert!(r.status_line.starts_with("HTTP/1.1 200"), "{path}: {r:?}");
        assert_eq!(r.text(), body, "{path}");
        assert_ne!(r.header("connection"), Some("close"), "{path}: {r:?}");
    }
    // One connection served all three.
    assert!(conn.silent_for(Duration::from_millis(200)).await);
}

// ---------------------------------------------------------------------------
// rewrite_location

/// `python3 -u -m http.server` on a free port over `dir`; killed on drop.
struct PythonServer {
    child: tokio::process::Child,
    port: u16,
}

impl PythonServer {
    async fn start(dir: &std::path::Path) -> PythonServer {
        let mut child = tokio::process::Command::from(common::reaper::command("python3"))
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 (tests/run installs it)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // "Serving HTTP on 127.0.0.1 port 43125 (http://127.0.0.1:43125/) ..."
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("python3 -m http.server started")
            .unwrap()
            .unwrap();
        let port = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("port in {line:?}"));
        PythonServer { child, port }
    }
}

/// An upstream that redirects to its `?to=` query, verbatim, with that URL
/// also as `Content-Location`.
async fn redirector() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                let to = req
                    .uri()
                    .query()
                    .and_then(|q| q.strip_prefix("to="))
                    .unwrap_or("/")
                    .to_owned();
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(302)
                        .header("location", &to)
                        .header("content-location", &to)
                        .body(Full::new(Bytes::new()))
                        .unwrap(),
                )
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc),
            );
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_location_puts_the_stripped_prefix_back() {
    let dir = common::gateway::temp_dir("static");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/file.txt"), "in sub\n").unwrap();
    let python = PythonServer::start(&dir).await;
    let redirect = redirector().await;
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          py: {{ targets: ["http://127.0.0.1:{py}"] }}
          redirect: {{ targets: ["http://{redirect}"] }}
        routes:
          - name: static
            match: {{ path: /static }}
            upstream: py
            strip_prefix: true
          - name: raw
            match: {{ path: /raw }}
            upstream: py
            strip_prefix: true
            rewrite_location: false
          - name: app
            match: {{ path: /app }}
            upstream: redirect
            strip_prefix: true
          - name: app-target-host
            match: {{ path: /tgt }}
            upstream: redirect
            strip_prefix: true
            preserve_host: false
          - name: unstripped
            match: {{ path: /sub }}
            upstream: py
        "#,
        py = python.port
    )))
    .await;
    let addr = gw.addr();

    // The browser's walk: /static/sub -> /static/sub/ -> the file.
    let r = client::get(addr, "/static/sub").await;
    assert_eq!(r.status, 301, "{}", r.text());
    assert_eq!(r.header("location"), Some("/static/sub/"));
    let r = client::get(addr, "/static/sub/").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("file.txt"), "{}", r.text());
    let r = client::get(addr, "/static/sub/file.txt").await;
    assert_eq!(r.text(), "in sub\n");

    // Off: the upstream's own redirect. No prefix stripped: nothing to put back.
    let r = client::get(addr, "/raw/sub").await;
    assert_eq!(r.header("location"), Some("/sub/"));
    let r = client::get(addr, "/sub").await;
    assert_eq!(r.header("location"), Some("/sub/"));

    // Absolute URLs: on the target, or on the Host the upstream was sent,
    // come back on the client's Host; other sites stay as they are.
    let target = format!("http://{redirect}");
    let host = [("host", "gw.example:8080")];
    for (path, to, expected) in [
        (
            "/app",
            format!("{target}/x?y=1"),
            "http://gw.example:8080/app/x?y=1".to_owned(),
        ),
        (
            "/app",
            "http://gw.example:8080/login".into(),
            "http://gw.example:8080/app/login".into(),
        ),
        (
            "/tgt",
            "http://gw.example:8080/login".into(),
            "http://gw.example:8080/login".into(),
        ),
        (
            "/tgt",
            format!("{target}/"),
            "http://gw.example:8080/tgt/".into(),
        ),
        (
            "/app",
            "https://elsewhere.example/x".into(),
            "https://elsewhere.example/x".into(),
        ),
        ("/app", "relative/x".into(), "relative/x".into()),
    ] {
        let r = client::get_with(addr, &format!("{path}/r?to={to}"), &host).await;
        assert_eq!(r.status, 302, "{}", r.text());
        assert_eq!(
            r.header("location"),
            Some(expected.as_str()),
            "{path} to {to}"
        );
        assert_eq!(
            r.header("content-location"),
            Some(expected.as_str()),
            "{path} to {to}"
        );
    }
    drop(python.child);
    let _ = std::fs::remove_dir_all(&dir);
}
