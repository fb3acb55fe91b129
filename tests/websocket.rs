//! WebSocket and other HTTP/1.1 upgrades through the gateway (docs/protocols.md): a
//! real WebSocket client (tokio-tungstenite) and a real WebSocket echo
//! server behind the real binary. The 101 is relayed and both directions
//! tunnelled; the route's limits decide the upgrade request and a
//! `concurrency` slot is held for the tunnel's life; an idle tunnel is
//! closed; SIGTERM lets tunnels run for `shutdown_grace`, then closes them;
//! `Upgrade: h2c` is never forwarded; a non-101 answer is relayed; an
//! upgrade request is not retried once sent; any other protocol is tunnelled
//! too, bytes sent early by either side included; `wss://` through the TLS
//! listener (ALPN `http/1.1`, or none).
//!
//! Timings: idle timeouts and graces are a few hundred milliseconds to two
//! seconds, with at least a second of margin on every bound.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::one_route::targets;
use common::{config, eventually, raw, Echo, Gateway, OneRoute};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{
    Callback, ErrorResponse, Request, Response,
};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long any single step may take before the test fails.
const STEP: Duration = Duration::from_secs(5);

/// A WebSocket echo server: every text and binary message comes back as
/// it was. The text `close-me` makes it start the close handshake; `drop-me`
/// makes it drop the TCP connection without one.
struct WsEcho {
    addr: SocketAddr,
    state: Arc<WsState>,
    task: tokio::task::JoinHandle<()>,
}

/// An upgrade request's head as the server saw it.
#[derive(Clone)]
struct Head {
    /// The request-target.
    path: String,
    /// Lowercase names and values, in order.
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct WsState {
    heads: Mutex<Vec<Head>>,
    /// Connections whose WebSocket session is running now.
    open: AtomicUsize,
}

impl WsEcho {
    async fn start() -> WsEcho {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(WsState::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(session(stream, st.clone()));
            }
        });
        WsEcho { addr, state, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn heads(&self) -> Vec<Head> {
        self.state.heads.lock().unwrap().clone()
    }

    fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }
}

impl Drop for WsEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Records the upgrade request's head in the state.
struct Recorder(Arc<WsState>);

impl Callback for Recorder {
    fn on_request(self, req: &Request, resp: Response) -> Result<Response, ErrorResponse> {
        let headers = req
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let path = req.uri().to_string();
        self.0.heads.lock().unwrap().push(Head { path, headers });
        Ok(resp)
    }
}

async fn session(stream: TcpStream, state: Arc<WsState>) {
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, Recorder(state.clone())).await
    else {
        return;
    };
    state.open.fetch_add(1, Ordering::SeqCst);
    while let Some(Ok(msg)) = ws.next().await {
        let echoed = match msg {
            Message::Text(t) if t.as_str() == "close-me" => {
                let _ = ws.close(None).await;
                // Read the client's answering Close; the stream then ends.
                while let Some(Ok(_)) = ws.next().await {}
                break;
            }
            Message::Text(t) if t.as_str() == "drop-me" => break,
            Message::Text(_) | Message::Binary(_) => ws.send(msg).await,
            _ => Ok(()),
        };
        if echoed.is_err() {
            break;
        }
    }
    drop(ws);
    state.open.fetch_sub(1, Ordering::SeqCst);
}

/// A gateway with route `ws` on `/ws` to the WebSocket echo.
fn to_ws(ws: &WsEcho) -> OneRoute {
    OneRoute::new()
        .named("ws")
        .matching("{ path: /ws }")
        .upstream_at("ws", &format!("[\"{}\"]", ws.url()))
}

/// Open a WebSocket to `path` through the gateway.
async fn connect(gw: &Gateway, path: &str) -> Result<(Client, http::Response<()>), WsError> {
    let url = format!("ws://{}{path}", gw.addr());
    let response = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
        .await
        .expect("the WebSocket handshake timed out")?;
    Ok((response.0, response.1.map(|_| ())))
}

/// The status of a refused handshake.
fn refused_status(result: Result<(Client, http::Response<()>), WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("the handshake failed otherwise: {other}"),
        Ok(_) => panic!("the handshake succeeded"),
    }
}

/// Send `msg` and expect it back.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>, msg: Message) {
    tokio::time::timeout(STEP, ws.send(msg.clone()))
        .await
        .expect("send timed out")
        .expect("send");
    let back = tokio::time::timeout(STEP, ws.next())
        .await
        .expect("no echo in time")
        .expect("the stream ended")
        .expect("a message");
    assert_eq!(back.len(), msg.len());
    assert!(back == msg, "a different message came back");
}

/// Read until the connection ends (the end of the stream or an error; a
/// Close frame is answered on the way, by reading on); how long that took,
/// or None if it was still open after `timeout`.
async fn wait_closed<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    timeout: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    tokio::time::timeout(timeout, async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_echoed_both_ways_and_the_close_handshake_passes() {
    let ws = WsEcho::start().await;
    let gw = to_ws(&ws).start().await;
    let (mut client, response) = connect(&gw, "/ws/chat?room=1").await.expect("upgraded");
    assert_eq!(response.status(), 101);
    assert!(response.headers().contains_key("x-request-id"));
    let upgrade = response.headers()["upgrade"].to_str().unwrap();
    assert!(upgrade.eq_ignore_ascii_case("websocket"), "{upgrade}");

    echo(&mut client, Message::text("hello")).await;
    echo(
        &mut client,
        Message::binary((0..=255u8).collect::<Vec<_>>()),
    )
    .await;
    // Large messages, several frames' worth of TCP each way.
    let big: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    echo(&mut client, Message::binary(big)).await;
    echo(&mut client, Message::text("é".repeat(512 * 1024))).await;
    for i in 0..50 {
        echo(&mut client, Message::text(format!("message {i}"))).await;
    }
    // The client starts the close handshake; the server answers it.
    client.close(None).await.expect("close");
    assert!(wait_closed(&mut client, STEP).await.is_some());

    // The backend saw the upgrade, with the forwarding headers.
    let heads = ws.heads();
    assert_eq!(heads.len(), 1);
    let head = &heads[0];
    assert_eq!(head.path, "/ws/chat?room=1");
    let header = |name: &str| head.header(name);
    assert_eq!(
        header("upgrade").map(str::to_lowercase).as_deref(),
        Some("websocket")
    );
    assert_eq!(
        header("connection").map(str::to_lowercase).as_deref(),
        Some("upgrade")
    );
    assert!(header("sec-websocket-key").is_some());
    assert_eq!(header("x-forwarded-for"), Some("127.0.0.1"));

    // One access-log line, when the tunnel ended.
    let line = gw
        .wait_access_log("the tunnel", |v| v["status"] == 101)
        .await;
    assert_eq!(line["route"], "ws");
    assert_eq!(line["completed"], true);
    let end = line["tunnel_end"].as_str().unwrap();
    assert!(end == "upstream_closed" || end == "client_closed", "{end}");
    let (to_client, from_client) = (
        line["bytes"].as_u64().unwrap(),
        line["bytes_in"].as_u64().unwrap(),
    );
    assert!(
        to_client > 5 * 1024 * 1024 && from_client > 5 * 1024 * 1024,
        "{line}"
    );
    eventually(STEP, "the echo session to end", || async {
        (ws.open() == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_through_the_tls_listener() {
    use std::sync::Arc;
    let pki = common::pki::Pki::new();
    let (cert, key) = pki.issue(&["gw.test"], "gw");
    let ws = WsEcho::start().await;
    let tls_listen: SocketAddr = "127.0.0.7:0".parse().unwrap();
    let server = format!(
        "tls:\n  listen: [\"{tls_listen}\"]\n  certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n",
        cert.display(),
        key.display()
    );
    let gw = to_ws(&ws).server(&server).start().await;
    let addr = gw.bound_addr(tls_listen);
    // What a browser's WebSocket offers (`http/1.1`), and no ALPN at all.
    for alpn in [vec![b"http/1.1".to_vec()], vec![]] {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(pki.roots())
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("gw.test").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        let (mut client, response) = tokio::time::timeout(
            STEP,
            tokio_tungstenite::client_async("wss://gw.test/ws/secure", tls),
        )
        .await
        .expect("the WebSocket handshake timed out")
        .expect("upgraded");
        assert_eq!(response.status(), 101);
        echo(&mut client, Message::text("over tls")).await;
        let big: Vec<u8> = (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        echo(&mut client, Message::binary(big)).await;
        client.close(None).await.expect("close");
        assert!(wait_closed(&mut client, STEP).await.is_some());
    }
    let heads = ws.heads();
    assert_eq!(heads.len(), 2);
    for head in heads {
        assert_eq!(head.path, "/ws/secure");
        assert_eq!(head.header("x-forwarded-proto"), Some("https"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_slot_is_held_for_the_tunnel_and_released_when_either_side_closes() {
    let ws = WsEcho::start().await;
    let gw = to_ws(&ws)
        .route_keys("limits: [{ algorithm: concurrency, limit: 1, key: client_ip }]")
        .start()
        .await;
    // Waits for the slot to come back: a new tunnel is allowed.
    let reopen = || async {
        eventually(STEP, "the slot to be released", || async {
            connect(&gw, "/ws").await.ok().map(|(c, _)| c)
        })
        .await
    };

    let (mut first, _) = connect(&gw, "/ws").await.expect("the first tunnel");
    echo(&mut first, Message::text("one")).await;
    for _ in 0..2 {
        assert_eq!(refused_status(connect(&gw, "/ws").await), 429);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The rejected upgrades never reached the upstream; the first still works.
    assert_eq!(ws.heads().len(), 1);
    echo(&mut first, Message::text("still here")).await;

    // The client closes: the slot comes back.
    first.close(None).await.expect("close");
    let mut second = reopen().await;
    echo(&mut second, Message::text("two")).await;
    assert_eq!(refused_status(connect(&gw, "/ws").await), 429);

    // The server closes (a close handshake it starts).
    second.send(Message::text("close-me")).await.expect("send");
    assert!(wait_closed(&mut second, STEP).await.is_some());
    let mut third = reopen().await;
    assert_eq!(refused_status(connect(&gw, "/ws").await), 429);

    // The server drops the connection without a close handshake.
    third.send(Message::text("drop-me")).await.expect("send");
    assert!(wait_closed(&mut third, STEP).await.is_some());
    let fourth = reopen().await;
    assert_eq!(refused_status(connect(&gw, "/ws").await), 429);

    // The client goes away without one.
    drop(fourth);
    let mut fifth = reopen().await;
    echo(&mut fifth, Message::text("five")).await;
    // One access-log line per tunnel that ended, written as it ended (the
    // slot is given back just before).
    let tunnels = || gw.access_logs().into_iter().filter(|v| v["status"] == 101);
    eventually(STEP, "four tunnels' access-log lines", || async {
        (tunnels().count() == 4).then_some(())
    })
    .await;
    let mut ends: Vec<String> = tunnels()
        .map(|v| v["tunnel_end"].as_str().unwrap_or_default().to_string())
        .collect();
    ends.sort();
    // The client's close handshake: the server closes the TCP connection
    // first, so that ends as upstream_closed.
    assert_eq!(
        ends,
        [
            "client_closed",
            "upstream_closed",
            "upstream_closed",
            "upstream_closed"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tunnel_is_closed_after_the_idle_timeout() {
    let ws = WsEcho::start().await;
    let idle = Duration::from_millis(800);
    let gw = to_ws(&ws).server("timeouts: { idle: 800ms }").start().await;
    let (mut client, _) = connect(&gw, "/ws").await.expect("upgraded");
    // Traffic every 250 ms for twice the idle timeout: the tunnel stays.
    let busy = Instant::now();
    loop {
        echo(&mut client, Message::text("tick")).await;
        if busy.elapsed() >= idle * 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Then silence: closed after the idle timeout, on both sides.
    let last_byte = Instant::now();
    wait_closed(&mut client, idle + STEP)
        .await
        .expect("the idle tunnel was not closed");
    let silence = last_byte.elapsed();
    assert!(
        silence >= idle - Duration::from_millis(200)
            && silence < idle + Duration::from_millis(1500),
        "closed after {silence:?} of silence, idle timeout {idle:?}"
    );
    eventually(STEP, "the upstream side to close", || async {
        (ws.open() == 0).then_some(())
    })
    .await;
    let line = gw
        .wait_access_log("the tunnel", |v| v["status"] == 101)
        .await;
    assert_eq!(line["tunnel_end"], "idle_timeout");
    assert_eq!(line["completed"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_tunnel_run_for_the_grace_then_closes_it_and_exits_0() {
    let ws = WsEcho::start().await;
    let grace = Duration::from_secs(2);
    let mut gw = to_ws(&ws).server("shutdown_grace: 2s").start().await;
    let (mut client, _) = connect(&gw, "/ws").await.expect("upgraded");
    echo(&mut client, Message::text("before")).await;
    let term = Instant::now();
    gw.sigterm();
    // During the grace the tunnel carries on.
    for at in [300, 1200] {
        tokio::time::sleep_until((term + Duration::from_millis(at)).into()).await;
        echo(&mut client, Message::text(format!("at {at} ms"))).await;
    }
    let closed = wait_closed(&mut client, grace + STEP)
        .await
        .expect("the tunnel outlived the grace");
    let closed_at = term.elapsed();
    assert!(
        closed_at >= grace - Duration::from_millis(200)
            && closed_at < grace + Duration::from_millis(1500),
        "closed {closed_at:?} after SIGTERM ({closed:?} after the last echo), grace {grace:?}"
    );
    let status = gw
        .wait_exit(STEP)
        .await
        .expect("tollgate did not exit after the grace");
    assert_eq!(status.code(), Some(0), "{}", gw.output());
    assert!(term.elapsed() < grace + Duration::from_secs(3));
    let line = gw
        .wait_access_log("the tunnel", |v| v["status"] == 101)
        .await;
    assert_eq!(line["tunnel_end"], "shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_upgrade_is_not_forwarded_and_the_request_is_answered_normally() {
    let echo = Echo::start("e").await;
    let h2 = Echo::start("h2").await;
    let gw = Gateway::start(&config(&format!(
        "
        upstreams:
          e: {{ targets: [\"{}\"] }}
          h2: {{ targets: [\"{}\"], http2: true }}
        routes:
          - {{ name: h2, match: {{ path: /h2up }}, upstream: h2 }}
          - {{ name: e, match: {{ path: / }}, upstream: e }}
        ",
        echo.url(),
        h2.url()
    )))
    .await;
    let mut c = raw::connect(gw.addr()).await;
    c.write(
        b"GET /first HTTP/1.1\r\n\
          Host: gw.example\r\n\
          Connection: Upgrade, HTTP2-Settings\r\n\
          Upgrade: h2c\r\n\
          HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\
          \r\n",
    )
    .await
    .unwrap();
    let r = c.read_response(STEP).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["path"], "/first");
    assert!(r.header("upgrade").is_none());
    let seen = echo.last().unwrap();
    for name in ["upgrade", "http2-settings"] {
        assert!(
            !seen.has_header(name),
            "{name} reached the upstream: {:?}",
            seen.headers
        );
    }
    for v in seen.header_all("connection") {
        assert!(!v.to_ascii_lowercase().contains("upgrade"), "{v}");
    }
    // The connection is still plain HTTP/1.1.
    c.write(b"GET /second HTTP/1.1\r\nHost: gw.example\r\n\r\n")
        .await
        .unwrap();
    let r = c.read_response(STEP).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/second");

    // A WebSocket upgrade to an HTTP/2 upstream cannot be carried: it goes
    // as a plain request.
    let r = raw::request(
        gw.addr(),
        b"GET /h2up HTTP/1.1\r\n\
          Host: gw.example\r\n\
          Connection: Upgrade\r\n\
          Upgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
          \r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = h2.last().unwrap();
    assert_eq!(seen.version, "HTTP/2");
    assert!(!seen.has_header("upgrade"), "{:?}", seen.headers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_101_answer_to_an_upgrade_is_relayed_as_a_response() {
    // The HTTP echo never switches protocols.
    let echo = Echo::start("e").await;
    let gw = OneRoute::new().named("e").upstream(&echo).start().await;
    // A real client is told no.
    let url = format!("ws://{}/status/403", gw.addr());
    let refused = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
        .await
        .expect("the handshake timed out");
    match refused {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status(), 403);
            let body = response.body().as_deref().unwrap_or_default();
            assert!(String::from_utf8_lossy(body).contains("/status/403"));
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("upgraded by an upstream that does not upgrade"),
    }
    // The upstream was asked for the upgrade.
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("upgrade").as_deref(), Some("websocket"));
    assert_eq!(seen.header("connection").as_deref(), Some("upgrade"));

    // On a raw connection: the answer, then the connection goes on as HTTP.
    let mut c = raw::connect(gw.addr()).await;
    c.write(
        b"GET /plain HTTP/1.1\r\n\
          Host: gw.example\r\n\
          Connection: keep-alive, Upgrade\r\n\
          Upgrade: foo/1\r\n\
          \r\n",
    )
    .await
    .unwrap();
    let r = c.read_response(STEP).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/plain");
    assert_eq!(
        echo.last().unwrap().header("upgrade").as_deref(),
        Some("foo/1")
    );
    c.write(b"GET /after HTTP/1.1\r\nHost: gw.example\r\n\r\n")
        .await
        .unwrap();
    let r = c.read_response(STEP).await.unwrap();
    assert_eq!(r.json()["path"], "/after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_request_is_retried_only_when_it_could_not_be_sent() {
    // Two targets that drop `/close` without an answer.
    let (a, b) = (Echo::start("a").await, Echo::start("b").await);
    let gw = OneRoute::new()
        .named("e")
        .upstream_at("e", &targets(&[&a, &b]))
        .upstream_keys("retries: 1")
        .start()
        .await;
    let sent = || a.count() + b.count();
    // A plain GET is idempotent: tried on both.
    let r = raw::get(gw.addr(), "/close").await;
    assert_eq!(r.status, 502);
    assert_eq!(sent(), 2);
    // An upgrade is not.
    let r = raw::request(
        gw.addr(),
        b"GET /close HTTP/1.1\r\n\
          Host: gw.example\r\n\
          Connection: Upgrade\r\n\
          Upgrade: websocket\r\n\
          \r\n",
    )
    .await;
    assert_eq!(r.status, 502);
    assert_eq!(sent(), 3);
}

/// Read from `stream` until `buf` holds `needle`; panics after [`STEP`].
async fn read_until(stream: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) {
    use tokio::io::AsyncReadExt;
    tokio::time::timeout(STEP, async {
        while !buf.windows(needle.len()).any(|w| w == needle) {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed before {:?}", String::from_utf8_lossy(needle));
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {:?} in time", String::from_utf8_lossy(needle)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_upgrade_protocol_is_tunnelled_with_bytes_sent_early_by_either_side() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An upstream speaking `foo/1`: it answers 101 and its greeting in one
    // write, then echoes every byte, the ones that came with the head too.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let seen = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        read_until(&mut stream, &mut buf, b"\r\n\r\n").await;
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let early = buf.split_off(end);
        stream
            .write_all(
                b"HTTP/1.1 101 Switching Protocols\r\n\
                  Connection: Upgrade\r\n\
                  Upgrade: foo/1\r\n\
                  \r\n\
                  greetings\n",
            )
            .await
            .unwrap();
        stream.write_all(&early).await.unwrap();
        let (mut r, mut w) = stream.split();
        tokio::io::copy(&mut r, &mut w).await.unwrap();
        String::from_utf8(buf).unwrap()
    });
    let gw = OneRoute::new()
        .named("foo")
        .upstream_at("foo", &format!("[\"http://{upstream}\"]"))
        .start()
        .await;
    let mut client = TcpStream::connect(gw.addr()).await.unwrap();
    // The first bytes of the new protocol right behind the request head.
    client
        .write_all(
            b"GET /foo HTTP/1.1\r\n\
              Host: gw.example\r\n\
              Connection: keep-alive, Upgrade, x-private\r\n\
              X-Private: 1\r\n\
              Upgrade: foo/1\r\n\
              \r\n\
              early bytes|",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    read_until(&mut client, &mut buf, b"early bytes|").await;
    let text = String::from_utf8_lossy(&buf).to_string();
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    let head = text.to_ascii_lowercase();
    assert!(head.contains("\r\nupgrade: foo/1\r\n"), "{text}");
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{text}");
    assert!(text.contains("\r\n\r\ngreetings\nearly bytes|"), "{text}");
    client.write_all(b"and more").await.unwrap();
    read_until(&mut client, &mut buf, b"and more").await;
    // The client closes its side: the upstream gets the end, closes too,
    // and so does the gateway.
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(STEP, client.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the tunnel was not closed");
    let head = seen.await.unwrap().to_ascii_lowercase();
    assert!(head.contains("\r\nupgrade: foo/1\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(!head.contains("x-private"), "{head}");
    let line = gw
        .wait_access_log("the tunnel", |v| v["status"] == 101)
        .await;
    assert_eq!(line["tunnel_end"], "client_closed");
    assert_eq!(line["bytes_in"], "early bytes|and more".len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_request_carries_the_trace_context_to_the_upstream() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let ws = WsEcho::start().await;
    let gw = to_ws(&ws).start().await;
    let mut request = format!("ws://{}/ws", gw.addr())
        .into_client_request()
        .unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "traceparent",
        format!("00-{TRACE}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    headers.insert("tracestate", "rojo=00f067aa0ba902b7".parse().unwrap());
    let (mut client, response) =
        tokio::time::timeout(STEP, tokio_tungstenite::connect_async(request))
            .await
            .expect("the WebSocket handshake timed out")
            .expect("the handshake");
    assert_eq!(response.status(), 101);
    echo(&mut client, Message::text("traced")).await;
    let head = ws.heads().pop().expect("the upstream saw the upgrade");
    let seen = head
        .header("traceparent")
        .expect("a traceparent")
        .to_string();
    let f: Vec<&str> = seen.split('-').collect();
    assert_eq!((f[0], f[1], f[3]), ("00", TRACE, "01"), "{seen}");
    assert_ne!(f[2], "00f067aa0ba902b7", "the gateway's span is the parent");
    assert_eq!(head.header("tracestate"), Some("rojo=00f067aa0ba902b7"));
}
