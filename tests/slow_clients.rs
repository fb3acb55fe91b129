//! Slow clients, idle connections and framing edges (`server.timeouts`,
//! docs/protocols.md): a stalled request body ends at `body_read`, a response that makes
//! no progress ends at `send` (HTTP/1.1 and HTTP/2), and neither pins an
//! upstream request; a connection with no request in progress lives for
//! `idle`, whatever `header_read` is; chunk sizes past `max_body_bytes` or
//! 2^63 are 400; a GET's body is forwarded; a 400 about the request line or
//! Host closes the connection; TRACE and CONNECT are 405.

mod common;

use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::client::{self, Resp};
use common::raw::{self, Closed};
use common::{eventually, Echo, OneRoute};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A catch-all route to `echo`, which may take a minute to answer.
fn patient(echo: &Echo) -> OneRoute {
    OneRoute::proxy(echo).upstream_keys("timeout: 60s")
}

async fn upstream_idle(echo: &Echo, within: Duration, what: &str) {
    eventually(within, what, || async {
        (echo.in_flight() == 0 && echo.open() == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_stalled_http1_body_is_408_and_its_upstream_request_is_cancelled() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo)
        .server("timeouts: { body_read: 1s }")
        .start()
        .await;
    let mut c = raw::connect(gw.addr()).await;
    c.write(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(3),
        "the upstream has the request",
        || async { (echo.in_flight() == 1).then_some(()) },
    )
    .await;
    let started = Instant::now();
    let r = c.read_response(Duration::from_secs(5)).await.expect("408");
    let took = started.elapsed();
    raw::assert_error(&r, 408, "request_timeout");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    assert!(matches!(
        c.wait_closed(Duration::from_secs(2)).await,
        Closed::After(_)
    ));
    upstream_idle(&echo, Duration::from_secs(2), "the upstream call is cut").await;
    assert_eq!(echo.completed(), 0, "the upstream never saw the body end");

    // A body that keeps coming, however slowly, is not cut.
    let mut c = raw::connect(gw.addr()).await;
    c.write(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        c.write(b"ab").await.unwrap();
    }
    let r = c.read_response(Duration::from_secs(5)).await.expect("200");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["len"], 8);
}

/// An h2c connection to `addr` (prior knowledge), with `window` as every
/// stream's initial receive window.
async fn h2c(
    addr: std::net::SocketAddr,
    window: Option<u32>,
) -> hyper::client::conn::http2::SendRequest<common::Body> {
    let io = TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    if let Some(window) = window {
        builder.initial_stream_window_size(window);
    }
    let (sender, conn) = builder.handshake(io).await.expect("h2c handshake");
    tokio::spawn(conn);
    sender
}

#[tokio::test]
async fn http2_streams_that_never_send_their_bodies_pin_no_upstream_request() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo)
        .server("timeouts: { body_read: 1s }")
        .start()
        .await;
    let mut sender = h2c(gw.addr(), None).await;
    let mut held = Vec::new();
    let mut answers = Vec::new();
    for i in 0..50 {
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, common::BoxError>>(1);
        held.push(tx);
        let body = client::boxed(StreamBody::new(tokio_stream_from(rx)));
        let req = Request::post(format!("http://a/upload/{i}"))
            .body(body)
            .unwrap();
        sender.ready().await.unwrap();
        answers.push(sender.send_request(req));
    }
    eventually(Duration::from_secs(3), "50 requests upstream", || async {
        (echo.in_flight() == 50).then_some(())
    })
    .await;
    let started = Instant::now();
    for answer in answers {
        let response = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("an answer within body_read and a margin")
            .expect("an answer, not a reset");
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    upstream_idle(&echo, Duration::from_secs(2), "every upstream call is cut").await;
    assert_eq!(echo.completed(), 0);
    drop(held);
    // The connection itself is fine.
    sender.ready().await.unwrap();
    let r = sender
        .send_request(Request::get("http://a/ok").body(client::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A stream of the frames sent on `rx`.
fn tokio_stream_from<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_at_send_and_so_is_its_upstream() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo)
        .server("timeouts: { send: 1s }")
        .start()
        .await;
    let mut c = raw::connect(gw.addr()).await;
    c.write(b"GET /download/1000000000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    eventually(Duration::from_secs(3), "the upstream streams", || async {
        (echo.open() == 1).then_some(())
    })
    .await;
    // Never read: the socket buffers fill, then nothing moves for `send`.
    upstream_idle(
        &echo,
        Duration::from_secs(8),
        "the upstream connection is closed once the client stalls",
    )
    .await;
    let mut read = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        use tokio::io::AsyncReadExt;
        match tokio::time::timeout(Duration::from_secs(5), c.stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => read += n as u64,
            Err(_) => panic!("the gateway kept the connection open"),
        }
    }
    assert!(
        read < 1_000_000_000,
        "the response was cut short ({read} bytes)"
    );

    // A reader that keeps reading, slowly, gets everything.
    let r = client::get(gw.addr(), "/download/20000000").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 20_000_000);
}

#[tokio::test]
async fn an_http2_stream_whose_window_stays_shut_is_reset_at_send() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo)
        .server("timeouts: { send: 1s }")
        .start()
        .await;
    let mut sender = h2c(gw.addr(), Some(0)).await;
    let response = sender
        .send_request(
            Request::get("http://a/download/100000000")
                .body(client::empty())
                .unwrap(),
        )
        .await
        .expect("the head needs no window");
    assert_eq!(response.status(), 200);
    let started = Instant::now();
    upstream_idle(
        &echo,
        Duration::from_secs(5),
        "the upstream request is cancelled",
    )
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800),
        "cut after {took:?}, before send"
    );
    let error = response
        .into_body()
        .collect()
        .await
        .expect_err("the stream was reset");
    let text = format!("{error:?}");
    assert!(text.contains("CANCEL"), "{text}");
    // The connection and its other streams go on.
    let r = sender
        .send_request(
            Request::get("http://a/status/204")
                .body(client::empty())
                .unwrap(),
        )
        .await
        .expect("another stream");
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn a_connection_without_a_request_in_progress_lives_for_idle_not_header_read() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo)
        .server("timeouts: { header_read: 1s, idle: 3s }")
        .start()
        .await;
    let opened = Instant::now();
    // Nothing sent at all.
    let mut silent = raw::connect(gw.addr()).await;
    // After a request.
    let mut after = raw::connect(gw.addr()).await;
    after
        .write(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let r = after.read_response(Duration::from_secs(3)).await.unwrap();
    assert_eq!(r.status, 200);
    // HTTP/2 (h2c): the preface and SETTINGS, then nothing.
    let mut h2 = raw::connect(gw.addr()).await;
    h2.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    // Part of a head: header_read runs from its first byte.
    let mut partial = raw::connect(gw.addr()).await;
    partial.write(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    let sent = Instant::now();
    assert!(matches!(
        partial.wait_closed(Duration::from_secs(3)).await,
        Closed::After(_)
    ));
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_millis(2000),
        "a partial head closed after {took:?}"
    );
    for (what, c) in [
        ("silent", &mut silent),
        ("after a request", &mut after),
        ("h2c", &mut h2),
    ] {
        let idle = Duration::from_millis(2700)..Duration::from_millis(4500);
        closed_within(c, opened, idle, what).await;
    }
}

/// Waits for the gateway to close `c`, and checks that it did `within`
/// that long after `since`.
async fn closed_within(c: &mut raw::RawConn, since: Instant, within: Range<Duration>, what: &str) {
    let wait = within.end.saturating_sub(since.elapsed()) + Duration::from_secs(1);
    let closed = c.wait_closed(wait).await;
    let took = since.elapsed();
    assert!(
        matches!(closed, Closed::After(_)) && within.contains(&took),
        "{what}: {closed:?} after {took:?}, not closed within {within:?}"
    );
}

#[tokio::test]
async fn a_reload_times_the_connections_accepted_after_it_and_the_gauge_counts_them() {
    const GAUGE: &str = "tollgate_connections_active";
    let echo = Echo::start("e").await;
    let idle = |secs: u64| patient(&echo).server(&format!("timeouts: {{ idle: {secs}s }}"));
    let gw = idle(4).start().await;
    let opened = Instant::now();
    let mut before = raw::connect(gw.addr()).await;
    let accepted = |n: f64| {
        let gw = &gw;
        move || async move { (gw.metric(GAUGE).await == Some(n)).then_some(()) }
    };
    eventually(Duration::from_secs(3), "one accepted", accepted(1.0)).await;
    gw.rewrite_config(&idle(1).config());
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let reopened = Instant::now();
    let mut after = raw::connect(gw.addr()).await;
    eventually(Duration::from_secs(3), "both accepted", accepted(2.0)).await;
    // The new idle timeout for the new connection, the old for the old.
    let ms = Duration::from_millis;
    let what = "accepted after the reload (idle 1s)";
    closed_within(&mut after, reopened, ms(800)..ms(2500), what).await;
    let what = "accepted before the reload (idle 4s)";
    closed_within(&mut before, opened, ms(3700)..ms(5500), what).await;
    eventually(Duration::from_secs(3), "none open", accepted(0.0)).await;
}

#[tokio::test]
async fn chunk_sizes_past_the_cap_or_2_pow_63_are_400_and_close() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo).server("max_body_bytes: 1KiB").start().await;
    let unlimited = patient(&echo).start().await;
    let chunked = |size: &str| {
        format!(
            "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nabc"
        )
    };
    for (addr, size) in [
        (unlimited.addr(), "ffffffffffffffff"),
        (unlimited.addr(), "8000000000000001"),
        (gw.addr(), "401"),
        (gw.addr(), "400;ext=1"),
    ] {
        let x = raw::exchange(addr, chunked(size).as_bytes()).await;
        if size.starts_with("400") {
            // Within the cap: waits for its 1024 bytes, never a 400.
            assert!(x.response.is_none(), "{size}: {x:?}");
            continue;
        }
        let r = x
            .response
            .unwrap_or_else(|| panic!("{size}: {:?}", x.error));
        raw::assert_error(&r, 400, "bad_request");
        assert!(x.closed, "{size}: the connection is closed");
    }
    // A size line sent apart from the head: the body is refused before any
    // byte of that chunk goes upstream.
    let mut c = raw::connect(unlimited.addr()).await;
    c.write(b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.write(b"ffffffffffffffff\r\nEVIL").await.unwrap();
    let r = c.read_response(Duration::from_secs(5)).await.expect("400");
    raw::assert_error(&r, 400, "bad_request");
    assert_eq!(echo.completed(), 0, "no upstream request completed");
    assert!(
        echo.body_bytes() <= 3,
        "nothing past the good chunk went upstream"
    );

    // The largest chunk the cap allows passes whole.
    let mut body =
        b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n".to_vec();
    body.extend(std::iter::repeat_n(b'x', 1024));
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let r = raw::request(gw.addr(), &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["len"], 1024);
}

#[tokio::test]
async fn a_get_with_a_body_has_it_forwarded_and_waits_for_it() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo).start().await;
    let mut c = raw::connect(gw.addr()).await;
    c.write(b"GET /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .unwrap();
    assert!(
        c.silent_for(Duration::from_millis(400)).await,
        "no answer before the body has arrived"
    );
    c.write(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
    let r = c.read_response(Duration::from_secs(5)).await.expect("200");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["len"], 11);
    let sent = echo.last().unwrap();
    assert_eq!(sent.method, "GET");
    assert_eq!(sent.header("transfer-encoding").as_deref(), Some("chunked"));

    // With a length, and over HTTP/2: the same.
    let r = raw::request(
        gw.addr(),
        b"GET /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd",
    )
    .await;
    assert_eq!(r.json()["len"], 4);
    let mut sender = h2c(gw.addr(), None).await;
    let r = sender
        .send_request(
            Request::get("http://a/upload")
                .body(client::full("over h2"))
                .unwrap(),
        )
        .await
        .unwrap();
    let r: Resp = client::collect(r).await.unwrap();
    assert_eq!(r.json()["len"], 7);
}

#[tokio::test]
async fn a_400_about_the_target_or_host_closes_the_connection() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo).start().await;
    let next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
    for first in [
        "GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /../x HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a@b\r\n\r\n",
        "GET /x HTTP/1.1\r\n\r\n",
    ] {
        let x = raw::exchange(gw.addr(), format!("{first}{next}").as_bytes()).await;
        let r = x
            .response
            .unwrap_or_else(|| panic!("{first:?}: {:?}", x.error));
        raw::assert_error(&r, 400, "bad_request");
        assert_eq!(r.header("connection"), Some("close"), "{first:?}");
        assert!(x.closed, "{first:?}: closed, the next request not served");
    }
    assert_eq!(echo.count_path("/next"), 0);
}

#[tokio::test]
async fn trace_and_connect_are_405() {
    let echo = Echo::start("e").await;
    let gw = patient(&echo).start().await;
    for head in [
        "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n",
        "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        "CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        let x = raw::exchange(gw.addr(), head.as_bytes()).await;
        let r = x
            .response
            .unwrap_or_else(|| panic!("{head:?}: {:?}", x.error));
        raw::assert_error(&r, 405, "method_not_allowed");
    }
    let mut sender = h2c(gw.addr(), None).await;
    let r = sender
        .send_request(
            Request::builder()
                .method(Method::TRACE)
                .uri("http://a/x")
                .body(client::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(echo.count(), 0);
}
