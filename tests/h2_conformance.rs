//! HTTP/2 and proxying conformance (SPEC §4), the cases an outside
//! conformance run found: a HEAD answered by the gateway carries no body on
//! HTTP/2 (curl `-I --http2-prior-knowledge`), `cookie` crumbs joined for an
//! HTTP/1.1 upstream, request trailers reaching an HTTP/1.1 upstream
//! undeclared, a pseudo-header in trailers as a stream error and a request
//! with neither `:authority` nor Host as a 400 (both with raw HTTP/2
//! frames), an HTTP/1.0 upstream behind a keep-alive HTTP/1.1 client, and
//! `rewrite_location` with `python3 -m http.server` behind a stripped
//! prefix.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use common::client::{self, Resp};
use common::upstream::FramesBody;
use common::{config, config_with_server, raw, Echo, Gateway};
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
        let out = tokio::process::Command::new("curl")
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

/// A gateway in front of `echo` over HTTP/1.1, with `server_extra` keys.
async fn h1_upstream_gateway(echo: &Echo, server_extra: &str) -> Gateway {
    Gateway::start(&config_with_server(
        server_extra,
        &format!(
            r#"
            upstreams:
              e: {{ targets: ["{}"] }}
            routes:
              - name: all
                match: {{ path: / }}
                upstream: e
            "#,
            echo.url()
        ),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_crumbs_from_an_h2_client_reach_an_http1_upstream_joined() {
    let echo = Echo::start("e").await;
    let gw = h1_upstream_gateway(&echo, "").await;
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
        let gw = h1_upstream_gateway(&echo, server_extra).await;
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
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const PROTOCOL_ERROR: u32 = 0x1;

/// An HTTP/2 connection spoken frame by frame (prior knowledge, h2c).
struct H2 {
    stream: TcpStream,
    buf: Vec<u8>,
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

/// An HPACK block of literal fields, never indexed, names sent as text
/// (RFC 7541 §6.2.2); every name and value under 127 bytes.
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x10);
        for s in [name, value] {
            assert!(s.len() < 127);
            block.push(s.len() as u8);
            block.extend_from_slice(s.as_bytes());
        }
    }
    block
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
        };
        h2.send(SETTINGS, 0, 0, &[]).await;
        h2
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend([kind, flags]);
        frame.extend(stream.to_be_bytes());
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).await.unwrap();
    }

    /// The next frame: (type, flags, stream, payload); `None` once closed.
    async fn frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9).collect();
                    let payload = self.buf.drain(..len).collect();
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & !(1 << 31);
                    return Some((head[3], head[4], stream, payload));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut chunk))
                .await
                .expect("the gateway answered in time")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads frames (acknowledging SETTINGS) until `stream` is answered.
    async fn answer(&mut self, stream: u32) -> Answer {
        loop {
            let Some((kind, flags, id, payload)) = self.frame().await else {
                return Answer::Closed;
            };
            let code = |p: &[u8], at: usize| u32::from_be_bytes(p[at..at + 4].try_into().unwrap());
            match kind {
                SETTINGS if flags & ACK == 0 => self.send(SETTINGS, ACK, 0, &[]).await,
                GOAWAY => return Answer::GoAway(code(&payload, 4)),
                HEADERS if id == stream => return Answer::Status(status_of(&payload)),
                RST_STREAM if id == stream => return Answer::Reset(code(&payload, 0)),
                _ => {}
            }
        }
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
    let gw = h1_upstream_gateway(&echo, "").await;
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
    let gw = h1_upstream_gateway(&echo, "").await;
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
    let gw = Gateway::start(&config(&format!(
        r#"
        upstreams:
          old: {{ targets: ["http://{upstream}"] }}
        routes:
          - name: all
            match: {{ path: / }}
            upstream: old
        "#
    )))
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
        let mut child = tokio::process::Command::new("python3")
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
