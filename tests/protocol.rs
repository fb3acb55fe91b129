//! Connection-level protection: head and body size limits, header-read and
//! idle timeouts, `max_connections`, and request smuggling / malformed
//! framing over raw TCP (docs/configuration/server.md, docs/protocols.md).

mod common;

use std::time::{Duration, Instant};

use common::raw::{self, Closed};
use common::{client, Echo, Gateway, OneRoute};
use tokio::io::AsyncWriteExt;

fn get_with_header(name: &str, value_len: usize) -> Vec<u8> {
    format!(
        "GET /h HTTP/1.1\r\nHost: x\r\n{name}: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(value_len)
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_over_max_header_bytes_is_431() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("max_header_bytes: 4KiB")
        .start()
        .await;
    let r = raw::request(gw.addr(), &get_with_header("x-small", 2000)).await;
    assert_eq!(
        r.status, 200,
        "a 2 KiB head is under 4 KiB: {}",
        r.status_line
    );
    assert_eq!(echo.count(), 1);
    for size in [5_000, 16_000, 100_000] {
        let r = raw::request(gw.addr(), &get_with_header("x-big", size)).await;
        assert_eq!(r.status, 431, "{size}-byte header: {}", r.status_line);
    }
    // Many small headers add up too.
    let mut req = String::from("GET /h HTTP/1.1\r\nHost: x\r\n");
    for i in 0..300 {
        req.push_str(&format!("x-h{i}: 0123456789\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    let r = raw::request(gw.addr(), req.as_bytes()).await;
    assert_eq!(r.status, 431, "300 headers of ~20 bytes: {}", r.status_line);
    assert_eq!(echo.count(), 1, "a 431 must not reach the upstream");
}

fn post_cl(len: usize) -> Vec<u8> {
    let mut v = format!(
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    v.extend(std::iter::repeat_n(b'b', len));
    v
}

fn post_chunked(chunks: usize, chunk_len: usize) -> Vec<u8> {
    let mut v = b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_vec();
    for _ in 0..chunks {
        v.extend(format!("{chunk_len:x}\r\n").as_bytes());
        v.extend(std::iter::repeat_n(b'c', chunk_len));
        v.extend(b"\r\n");
    }
    v.extend(b"0\r\n\r\n");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_max_body_bytes_is_413_and_never_forwarded() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("max_body_bytes: 1KiB")
        .start()
        .await;

    // Content-Length over the cap: rejected from the head alone.
    let r = raw::request(gw.addr(), &post_cl(2048)).await;
    raw::assert_error(&r, 413, "payload_too_large");
    // A chunked body that grows over the cap.
    let r = raw::request(gw.addr(), &post_chunked(4, 512)).await;
    raw::assert_error(&r, 413, "payload_too_large");
    // h2c with a body over the cap.
    let r = client::send(
        &client::h2c(),
        client::req(http::Method::POST, gw.addr(), "/upload")
            .body(client::full(vec![b'd'; 4096]))
            .unwrap(),
    )
    .await;
    r.assert_error(413, "payload_too_large");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        echo.body_bytes(),
        0,
        "the upstream received body bytes of a rejected request"
    );

    // At the cap, fine, both ways.
    let r = raw::request(gw.addr(), &post_cl(1024)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["len"], 1024);
    let r = raw::request(gw.addr(), &post_chunked(2, 512)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["len"], 1024);
    assert_eq!(echo.body_bytes(), 2048);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_head_is_cut_off_after_header_read() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("timeouts: { header_read: 500ms, idle: 30s }")
        .start()
        .await;
    let mut c = raw::connect(gw.addr()).await;
    half_a_head_is_cut_off_after_500ms(&mut c).await;
    assert_eq!(echo.count(), 0);
}

/// Send half a head on `c`; it must be closed about 500 ms (the tests'
/// `header_read`) later.
async fn half_a_head_is_cut_off_after_500ms(c: &mut raw::RawConn) {
    c.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Partial: ")
        .await
        .unwrap();
    match c.wait_closed(Duration::from_secs(5)).await {
        Closed::After(t) => assert!(
            t >= Duration::from_millis(400) && t < Duration::from_millis(2500),
            "closed {t:?} after the head began, want about 500ms"
        ),
        Closed::StillOpen => panic!("a half-sent head was not cut off within 5 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_head_is_cut_off_after_header_read_in_total() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("timeouts: { header_read: 500ms, idle: 30s }")
        .start()
        .await;
    let c = raw::connect(gw.addr()).await;
    let (mut rd, mut wr) = c.stream.into_split();
    // Slowloris: one byte every 100 ms, never finishing the head.
    let writer = tokio::spawn(async move {
        let _ = wr
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Drip: ")
            .await;
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if wr.write_all(b"a").await.is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        use tokio::io::AsyncReadExt;
        match tokio::time::timeout(Duration::from_secs(5), rd.read(&mut buf)).await {
            Err(_) => break None,
            Ok(Ok(0)) | Ok(Err(_)) => break Some(start.elapsed()),
            Ok(Ok(_)) => continue,
        }
    };
    writer.abort();
    let t = closed.expect("a dribbled head was not cut off within 5 s");
    assert!(
        t < Duration::from_millis(2500),
        "header_read must bound the whole head, closed after {t:?}"
    );
    assert_eq!(echo.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_read_times_later_heads_from_their_first_byte_not_idle_time() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("timeouts: { header_read: 500ms, idle: 30s }")
        .start()
        .await;
    let req = b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut c = raw::connect(gw.addr()).await;
    for pause in [0, 1500] {
        // Idle for three times header_read before the second: a keep-alive
        // connection waits for `idle`, not `header_read` (hyper's own head
        // timer runs from the end of a response and would have closed it).
        tokio::time::sleep(Duration::from_millis(pause)).await;
        c.write(req).await.unwrap();
        let r = c.read_response(Duration::from_secs(5)).await;
        assert_eq!(r.map(|r| r.status), Ok(200), "after {pause} ms idle");
    }
    // Half a head: cut off about header_read after its first byte.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    half_a_head_is_cut_off_after_500ms(&mut c).await;
    assert_eq!(echo.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("timeouts: { header_read: 10s, idle: 500ms }")
        .start()
        .await;
    let req = b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n";

    // In use: requests every 200 ms for 1.5 s keep the connection open.
    let mut busy = raw::connect(gw.addr()).await;
    for i in 0..8 {
        busy.write(req).await.unwrap();
        let r = busy
            .read_response(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("request {i} on a busy keep-alive connection: {e}"));
        assert_eq!(r.status, 200);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Idle: closed after about 500 ms.
    let mut idle = raw::connect(gw.addr()).await;
    idle.write(req).await.unwrap();
    let r = idle.read_response(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.status, 200);
    match idle.wait_closed(Duration::from_secs(5)).await {
        Closed::After(t) => assert!(
            t >= Duration::from_millis(300) && t < Duration::from_millis(2500),
            "idle connection closed after {t:?}, want about 500ms"
        ),
        Closed::StillOpen => panic!("an idle keep-alive connection stayed open for 5 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_wait_instead_of_failing() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo)
        .server("max_connections: 2")
        .start()
        .await;
    let req = b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut a = raw::connect(gw.addr()).await;
    a.write(req).await.unwrap();
    assert_eq!(
        a.read_response(Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );
    let mut b = raw::connect(gw.addr()).await;
    b.write(req).await.unwrap();
    assert_eq!(
        b.read_response(Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );

    // The third waits: no answer, no reset.
    let mut c = raw::connect(gw.addr()).await;
    c.write(req).await.unwrap();
    assert!(
        c.silent_for(Duration::from_millis(800)).await,
        "a third connection was served (or closed) while max_connections=2 were open"
    );
    assert_eq!(echo.count(), 2);

    // One closes: the waiting one is served.
    drop(a);
    let r = c
        .read_response(Duration::from_secs(5))
        .await
        .expect("the waiting connection was not served after another closed");
    assert_eq!(r.status, 200);
    assert_eq!(echo.count(), 3);
    // And b still works.
    b.write(req).await.unwrap();
    assert_eq!(
        b.read_response(Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );
}

/// Sends `bytes`, expects one of `statuses` (or, if `allow_silent_close`, a
/// close without a response), then the connection closed, and the upstream
/// untouched.
async fn assert_rejected(
    gw: &Gateway,
    echo: &Echo,
    what: &str,
    bytes: &[u8],
    statuses: &[u16],
    must_close: bool,
    allow_silent_close: bool,
) {
    let before = echo.count();
    let ex = raw::exchange(gw.addr(), bytes).await;
    match &ex.response {
        Some(r) => assert!(
            statuses.contains(&r.status),
            "{what}: got {:?}, want one of {statuses:?}; body {:?}",
            r.status_line,
            r.text()
        ),
        None => assert!(
            allow_silent_close && ex.closed,
            "{what}: no response ({:?}), connection closed: {}",
            ex.error,
            ex.closed
        ),
    }
    if must_close {
        assert!(ex.closed, "{what}: the connection was left open");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        echo.count(),
        before,
        "{what}: the upstream saw {:?}",
        echo.last().map(|r| r.path)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_400_and_closes() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let smuggled = "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let cl_first = format!(
        "POST /cl-te HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{smuggled}",
        smuggled.len()
    );
    assert_rejected(
        &gw,
        &echo,
        "CL then TE",
        cl_first.as_bytes(),
        &[400],
        true,
        false,
    )
    .await;
    let te_first = format!(
        "POST /te-cl HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{smuggled}"
    );
    assert_rejected(
        &gw,
        &echo,
        "TE then CL",
        te_first.as_bytes(),
        &[400],
        true,
        false,
    )
    .await;
    assert_eq!(echo.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differing_content_lengths_are_400_and_close() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    assert_rejected(
        &gw,
        &echo,
        "two Content-Length fields",
        b"POST /dup HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        &[400],
        true,
        false,
    )
    .await;
    assert_rejected(
        &gw,
        &echo,
        "Content-Length: 5, 6",
        b"POST /dup HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
        &[400],
        true,
        false,
    )
    .await;
    assert_rejected(
        &gw,
        &echo,
        "negative Content-Length",
        b"POST /dup HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\nhello!",
        &[400],
        true,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_transfer_codings_are_rejected_and_close() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for te in ["gzip, chunked", "identity", "chunked, identity", "xchunked"] {
        let req = format!(
            "POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
        assert_rejected(
            &gw,
            &echo,
            &format!("Transfer-Encoding: {te}"),
            req.as_bytes(),
            &[400, 501],
            true,
            false,
        )
        .await;
    }
    // An obfuscated header name is malformed.
    assert_rejected(
        &gw,
        &echo,
        "Transfer-Encoding with a space before the colon",
        b"POST /te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        &[400],
        true,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunk_sizes_are_rejected_and_nothing_is_forwarded() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for (what, body) in [
        ("non-hex chunk size", "zz\r\nhello\r\n0\r\n\r\n"),
        (
            "overflowing chunk size",
            "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        ),
        ("negative chunk size", "-5\r\nhello\r\n0\r\n\r\n"),
    ] {
        let req =
            format!("POST /chunk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
        assert_rejected(&gw, &echo, what, req.as_bytes(), &[400], true, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framing_error_mid_body_never_delivers_a_complete_request() {
    // A streaming gateway may have sent the head upstream before the bad
    // chunk arrives; it must then abort the upstream request rather than end
    // it cleanly, so the upstream never acts on a truncated body.
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for (what, body) in [
        ("chunk longer than its size", "2\r\nhello\r\n0\r\n\r\n"),
        (
            "bad size after a good chunk",
            "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
        ),
    ] {
        let req =
            format!("POST /chunk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
        let ex = raw::exchange(gw.addr(), req.as_bytes()).await;
        if let Some(r) = &ex.response {
            assert_eq!(r.status, 400, "{what}: {:?} {:?}", r.status_line, r.text());
        }
        assert!(ex.closed, "{what}: the connection was left open");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            echo.completed(),
            0,
            "{what}: the upstream received a complete request"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_duplicate_or_invalid_host_is_400() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for (what, req) in [
        ("no Host", "GET /nohost HTTP/1.1\r\nConnection: close\r\n\r\n"),
        (
            "two different Hosts",
            "GET /twohosts HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n",
        ),
        (
            "the same Host twice",
            "GET /twohosts HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        ),
        (
            "a Host with a space",
            "GET /badhost HTTP/1.1\r\nHost: exa mple.com\r\nConnection: close\r\n\r\n",
        ),
        (
            "a Host with a bad port",
            "GET /badhost HTTP/1.1\r\nHost: example.com:port\r\nConnection: close\r\n\r\n",
        ),
    ] {
        assert_rejected(&gw, &echo, what, req.as_bytes(), &[400], false, false).await;
    }
    // HTTP/1.0 has no Host requirement.
    let r = raw::request(gw.addr(), b"GET /old HTTP/1.0\r\n\r\n").await;
    assert_eq!(r.status, 200, "HTTP/1.0 without Host: {}", r.status_line);
    assert_eq!(echo.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_framing_is_forwarded_with_the_gateways_own_framing() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    // Two pipelined requests, the first chunked: both answered, in order.
    let mut c = raw::connect(gw.addr()).await;
    c.write(
        b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n\
          GET /second HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let r1 = c.read_response(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r1.status, 200);
    assert_eq!(r1.json()["path"], "/first");
    assert_eq!(r1.json()["body_len"], 11);
    let r2 = c.read_response(Duration::from_secs(5)).await.unwrap();
    assert_eq!(r2.status, 200);
    assert_eq!(r2.json()["path"], "/second");
    assert_eq!(echo.count(), 2);
    let first = &echo.requests()[0];
    let te = first.header_all("transfer-encoding");
    let cl = first.header_all("content-length");
    assert!(
        (te == vec!["chunked".to_string()] && cl.is_empty())
            || (te.is_empty() && cl == vec!["11".to_string()]),
        "upstream framing: transfer-encoding {te:?} content-length {cl:?}"
    );
}
