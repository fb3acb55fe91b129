//! Streaming: 256 MiB both ways through the gateway with its memory watched,
//! trailers over h2c and chunked HTTP/1.1 (docs/protocols.md), plus a self-check of
//! the echo fixture these tests rely on.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::client::{self, Resp};
use common::gateway::rss_kib;
use common::upstream::{FramesBody, PatternBody};
use common::{config, matches_pattern, pattern_checksum, Checksum, Echo, Gateway};
use http::{HeaderMap, HeaderValue, Method};
use http_body::Frame;
use http_body_util::BodyExt;

const BIG: u64 = 256 * 1024 * 1024;
/// How far above its idle RSS the gateway may go while streaming.
const RSS_HEADROOM_KIB: u64 = 64 * 1024;

/// Samples a process's RSS every 20 ms until stopped; returns the maximum.
struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut max = 0;
            while !flag.load(Ordering::SeqCst) {
                max = max.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            max.max(rss_kib(pid))
        });
        RssSampler { stop, handle }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap()
    }
}

async fn streaming_gateway(echo: &Echo) -> Gateway {
    Gateway::start(&config(&format!(
        r#"
        upstreams:
          e: {{ targets: ["{}"], timeout: 60s }}
          e2: {{ targets: ["{}"], timeout: 60s, http2: true }}
        routes:
          - name: h2up
            match: {{ path: /h2up }}
            upstream: e2
            strip_prefix: true
          - name: all
            match: {{ path: / }}
            upstream: e
        "#,
        echo.url(),
        echo.url()
    )))
    .await
}

/// Warms the gateway up, then reads its idle RSS.
async fn idle_rss(gw: &Gateway) -> u64 {
    for _ in 0..5 {
        assert_eq!(client::get(gw.addr(), "/warm").await.status, 200);
    }
    let r = client::send(
        &client::h1(),
        client::req(Method::POST, gw.addr(), "/upload")
            .body(client::boxed(PatternBody::new(4 * 1024 * 1024, false)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    gw.rss_kib()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_256_mib_streams_without_buffering() {
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let idle = idle_rss(&gw).await;
    assert!(idle > 0, "cannot read the gateway's RSS");
    let want = tokio::task::spawn_blocking(|| pattern_checksum(BIG));

    let sampler = RssSampler::start(gw.pid());
    let start = Instant::now();
    let req = client::req(Method::POST, gw.addr(), "/upload")
        .body(client::boxed(PatternBody::new(BIG, false)))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(60), client::h1().request(req))
        .await
        .expect("256 MiB upload timed out")
        .expect("256 MiB upload failed");
    let r = client::collect(resp).await.unwrap();
    let took = start.elapsed();
    let max = sampler.finish();

    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["len"], BIG, "{v}");
    assert_eq!(v["pattern_ok"], true, "the upstream saw altered bytes: {v}");
    assert_eq!(v["checksum"], want.await.unwrap(), "{v}");
    assert!(
        max.saturating_sub(idle) < RSS_HEADROOM_KIB,
        "gateway RSS went from {idle} KiB idle to {max} KiB during a 256 MiB upload: buffering"
    );
    eprintln!("upload: {took:?}, RSS idle {idle} KiB, max {max} KiB");
}

/// Streams a download, checking every byte against the pattern without
/// keeping it.
async fn stream_download(client: &client::HttpClient, gw: &Gateway, path: &str) -> (u64, String) {
    let req = client::req(Method::GET, gw.addr(), path)
        .body(client::empty())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("download head timed out")
        .expect("download failed");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut sum = Checksum::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = tokio::time::timeout(left, body.frame())
            .await
            .expect("download body timed out");
        let Some(frame) = frame else { break };
        let frame = frame.expect("download body error");
        if let Ok(data) = frame.into_data() {
            assert!(
                matches_pattern(sum.len(), &data),
                "altered bytes at offset {}",
                sum.len()
            );
            sum.update(&data);
        }
    }
    (sum.len(), sum.hex())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_256_mib_streams_without_buffering() {
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let idle = idle_rss(&gw).await;
    let want = tokio::task::spawn_blocking(|| pattern_checksum(BIG));

    let sampler = RssSampler::start(gw.pid());
    let start = Instant::now();
    let (len, sum) = stream_download(&client::h1(), &gw, &format!("/download/{BIG}")).await;
    let took = start.elapsed();
    let max = sampler.finish();

    assert_eq!(len, BIG);
    assert_eq!(sum, want.await.unwrap());
    assert!(
        max.saturating_sub(idle) < RSS_HEADROOM_KIB,
        "gateway RSS went from {idle} KiB idle to {max} KiB during a 256 MiB download: buffering"
    );
    eprintln!("download: {took:?}, RSS idle {idle} KiB, max {max} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_over_h2c_from_an_h2_upstream_streams() {
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let n: u64 = 32 * 1024 * 1024;
    let (len, sum) = stream_download(&client::h2c(), &gw, &format!("/h2up/download/{n}")).await;
    assert_eq!(len, n);
    assert_eq!(sum, pattern_checksum(n));
}

fn assert_trailers(r: &Resp, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    assert_eq!(r.text(), "trailers-body", "{what}");
    let t = r
        .trailers
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no trailers reached the client"));
    assert_eq!(
        t.get("x-trailer-one").map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "{what}: {t:?}"
    );
    assert_eq!(
        t.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..]),
        "{what}: {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_over_h2c_and_chunked_http1() {
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let r = client::get_h2c(gw.addr(), "/h2up/trailers").await;
    assert_trailers(&r, "h2c client, h2 upstream");
    let r = client::send(
        &client::h1(),
        client::req(Method::GET, gw.addr(), "/h2up/trailers")
            .header("te", "trailers")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        r.header("transfer-encoding"),
        Some("chunked"),
        "trailers need a chunked response"
    );
    assert_trailers(&r, "HTTP/1.1 client (TE: trailers), h2 upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_over_http1_end_to_end() {
    // The HTTP/1.1 upstream only sends trailers to a peer that said
    // `TE: trailers`, so the gateway has to say it when its client did.
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let r = client::send(
        &client::h1(),
        client::req(Method::GET, gw.addr(), "/trailers")
            .header("te", "trailers")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_trailers(&r, "HTTP/1.1 client (TE: trailers), HTTP/1.1 upstream");
    let r = client::get_h2c(gw.addr(), "/trailers").await;
    assert_trailers(&r, "h2c client, HTTP/1.1 upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_pass_from_h2c_to_an_h2_upstream() {
    let echo = Echo::start("e").await;
    let gw = streaming_gateway(&echo).await;
    let mut t = HeaderMap::new();
    t.insert("x-req-trailer", HeaderValue::from_static("done"));
    let body = FramesBody::new(vec![
        Frame::data(Bytes::from_static(b"part one,")),
        Frame::data(Bytes::from_static(b"part two")),
        Frame::trailers(t),
    ]);
    let r = client::send(
        &client::h2c(),
        client::req(Method::POST, gw.addr(), "/h2up/grpc-like")
            .header("content-type", "application/grpc")
            .body(client::boxed(body))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["body_len"], 17);
    assert_eq!(
        v["http_version"], "HTTP/2",
        "upstream http2: true speaks h2"
    );
    assert_eq!(
        v["trailers"],
        serde_json::json!([["x-req-trailer", "done"]]),
        "request trailers at the upstream"
    );
}

/// The fixture itself, without a gateway: if this fails, the harness is
/// broken, not the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_upstream_fixture_self_check() {
    let echo = Echo::start("self").await;
    let addr = echo.addr();
    let r = client::get(addr, "/status/201?x=1").await;
    assert_eq!(r.status, 201);
    assert_eq!(r.upstream(), "self");
    assert_eq!(r.echo_path(), "/status/201?x=1");
    assert_eq!(r.json()["http_version"], "HTTP/1.1");
    let r = client::get_h2c(addr, "/x").await;
    assert_eq!(r.json()["http_version"], "HTTP/2");
    let start = Instant::now();
    assert_eq!(client::get(addr, "/delay/200").await.status, 200);
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_trailers(&client::get_h2c(addr, "/trailers").await, "echo h2c");
    let r = client::send(
        &client::h1(),
        client::req(Method::GET, addr, "/trailers")
            .header("te", "trailers")
            .body(client::empty())
            .unwrap(),
    )
    .await;
    assert_trailers(&r, "echo h1");
    let n = 8 * 1024 * 1024 + 5;
    let r = client::send(
        &client::h1(),
        client::req(Method::POST, addr, "/upload")
            .body(client::boxed(PatternBody::new(n, false)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.json()["len"], n);
    assert_eq!(r.json()["checksum"], pattern_checksum(n));
    assert_eq!(r.json()["pattern_ok"], true);
    let r = client::get(addr, &format!("/download/{n}")).await;
    assert_eq!(r.body.len() as u64, n);
    assert!(matches_pattern(0, &r.body));
    assert!(client::try_send(
        &client::h1(),
        client::req(Method::GET, addr, "/close")
            .body(client::empty())
            .unwrap()
    )
    .await
    .is_err());
    let r = common::raw::get(addr, "/raw?q").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/raw?q");
    assert_eq!(echo.count(), 9);
    assert_eq!(echo.last().unwrap().path, "/raw?q");
    assert_eq!(echo.body_bytes(), n);
}
