//! The LLM streaming rows of benches/e2e/run (`--only llm`): an upstream
//! that streams OpenAI chat completions as server-sent events, and the
//! clients that load it through tollgate.
//!
//! ```text
//! sse_bench serve ADDR                                   the upstream
//! sse_bench load ADDR BODY -c CONNS -d SECS [-r RATE] [-p MS]
//!                                       closed loop, or RATE req/s; chunks MS apart
//! sse_bench hold ADDR BODY -n N                          N streams held open
//! ```
//!
//! `serve` answers every request with a `text/event-stream` of nine chat
//! chunks, the usage chunk when the request asked for it
//! (`"include_usage":true`; the other chunks then say `"usage":null`, as
//! OpenAI's do), and `data: [DONE]`: 120 prompt
//! and 16 completion tokens. The whole stream goes in one write, unless the
//! request has `x-pace-ms: N` (each content chunk N ms after the one
//! before, the first at once, as a model generates them; the finish chunk,
//! the usage chunk and `[DONE]` in one write, as OpenAI sends them) or `x-hold: 1` (only the first chunk
//! is sent and the stream stays open until the client goes).
//!
//! `load` sends `POST /v1/chat/completions` with the JSON body in the file
//! BODY on CONNS keep-alive HTTP/1.1 connections for SECS seconds: each
//! connection as fast as it goes, or, with `-r`, at RATE req/s in all (each
//! connection on its own schedule, spread over one interval). Times count
//! from the send: Tokio's timer wakes up to a millisecond late, which would
//! swamp the figures if they counted from when a request was due; instead
//! `late` counts the requests sent more than an interval late (held up by
//! the previous one on their connection), which at a rate well below the
//! maximum should be none. It prints one JSON line
//! with wrk's field names (benches/e2e/report.lua), latency being the time
//! to the last byte, plus `ttfb_p50_us`/`ttfb_p90_us`/`ttfb_p99_us`: the
//! time to the first byte of the body (the first event).
//!
//! `hold` opens N connections, sends each the request with `x-hold: 1`,
//! waits until each has its first event, prints `ready OPENED FAILED` and
//! keeps them open until killed: the gateway then holds N live streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http1 as client_http1;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("serve") if args.len() == 2 => rt.block_on(serve(&args[1])),
        Some("load") => rt.block_on(load(&Opts::parse(&args[1..])?)),
        Some("hold") => rt.block_on(hold(&Opts::parse(&args[1..])?)),
        _ => bail!(
            "usage: sse_bench serve ADDR | load ADDR BODY -c C -d S [-r R] | hold ADDR BODY -n N"
        ),
    }
}

/// The arguments of `load` and `hold`.
struct Opts {
    addr: String,
    body: Bytes,
    conns: usize,
    secs: f64,
    rate: Option<f64>,
    /// Ask the upstream for chunks this many ms apart.
    pace: Option<u64>,
}

impl Opts {
    fn parse(args: &[String]) -> anyhow::Result<Opts> {
        let [addr, body, rest @ ..] = args else {
            bail!("ADDR and BODY are required");
        };
        let mut opts = Opts {
            addr: addr.clone(),
            body: std::fs::read(body).context("the body file")?.into(),
            conns: 64,
            secs: 5.0,
            rate: None,
            pace: None,
        };
        for pair in rest.chunks(2) {
            let [flag, value] = pair else {
                bail!("{} needs a value", pair[0]);
            };
            match flag.as_str() {
                "-c" | "-n" => opts.conns = value.parse()?,
                "-d" => opts.secs = value.parse()?,
                "-r" => opts.rate = Some(value.parse()?),
                "-p" => opts.pace = Some(value.parse()?),
                other => bail!("unknown option {other}"),
            }
        }
        Ok(opts)
    }
}

// ---------------------------------------------------------------------------
// The upstream

/// A chunk of the stream, `content` its delta; with `usage` asked for,
/// it says `"usage":null`, as OpenAI's chunks then do.
fn chunk(content: &str, finish: Option<&str>, usage: bool) -> String {
    let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
    let usage = if usage { ",\"usage\":null" } else { "" };
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
         \"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\
         \"finish_reason\":{finish}}}]{usage}}}\n\n"
    )
}

/// The stream's writes: the content chunks, then the finish chunk with
/// the usage chunk (or without) and `[DONE]`.
fn events(usage: bool) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = (0..8)
        .map(|i| chunk(&format!("token{i} "), None, usage).into())
        .collect();
    let mut last = chunk("", Some("stop"), usage).into_bytes();
    if usage {
        last.extend_from_slice(
            b"data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
             \"model\":\"bench-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":120,\
             \"completion_tokens\":16,\"total_tokens\":136}}\n\n",
        );
    }
    last.extend_from_slice(b"data: [DONE]\n\n");
    out.push(last.into());
    out
}

/// A body of `events` sent `pace` apart by a task of its own.
struct Paced(tokio::sync::mpsc::Receiver<Bytes>);

impl Paced {
    fn new(events: Vec<Bytes>, pace: Duration) -> Paced {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            for (i, event) in events.into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(pace).await;
                }
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        });
        Paced(rx)
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|e| Ok(Frame::data(e))))
    }
}

/// A body that sends one frame, then nothing more until it is dropped.
struct Held(Option<Bytes>);

impl Body for Held {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(first) => std::task::Poll::Ready(Some(Ok(Frame::data(first)))),
            None => std::task::Poll::Pending,
        }
    }
}

type Either = http_body_util::Either<Full<Bytes>, http_body_util::Either<Held, Paced>>;

async fn serve(addr: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let (with_usage, without) = (Arc::new(events(true)), Arc::new(events(false)));
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (with_usage, without) = (with_usage.clone(), without.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let (with_usage, without) = (with_usage.clone(), without.clone());
                async move {
                    let held = req.headers().contains_key("x-hold");
                    let pace = req
                        .headers()
                        .get("x-pace-ms")
                        .and_then(|v| v.to_str().ok()?.parse().ok())
                        .map(Duration::from_millis);
                    let body = req.into_body().collect().await?.to_bytes();
                    let usage = memchr_find(&body, b"\"include_usage\":true");
                    let all = if usage { with_usage } else { without };
                    let body = if held {
                        let first = Bytes::from(chunk("first ", None, usage));
                        Either::Right(http_body_util::Either::Left(Held(Some(first))))
                    } else if let Some(pace) = pace {
                        let paced = Paced::new(all.to_vec(), pace);
                        Either::Right(http_body_util::Either::Right(paced))
                    } else {
                        Either::Left(Full::new(all.concat().into()))
                    };
                    let response = Response::builder()
                        .header("content-type", "text/event-stream")
                        .header("cache-control", "no-cache")
                        .body(body)
                        .expect("a valid response");
                    Ok::<_, hyper::Error>(response)
                }
            });
            let _ = server_http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// Whether `needle` occurs in `haystack`.
fn memchr_find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------
// The clients

/// One connection's sender.
async fn connect(addr: &str) -> anyhow::Result<client_http1::SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = client_http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The request, `held` with `x-hold: 1`, paced with `x-pace-ms`.
fn request(opts: &Opts, held: bool) -> Request<Full<Bytes>> {
    let (addr, body) = (&opts.addr, &opts.body);
    let mut req = Request::post("/v1/chat/completions")
        .header("host", addr)
        .header("content-type", "application/json")
        .header("x-tenant", "bench");
    if held {
        req = req.header("x-hold", "1");
    }
    if let Some(ms) = opts.pace {
        req = req.header("x-pace-ms", ms);
    }
    req.body(Full::new(body.clone())).expect("a valid request")
}

/// What one connection saw.
#[derive(Default)]
struct Seen {
    /// Time to the first body byte, and to the last, per request (µs).
    ttfb: Vec<u32>,
    total: Vec<u32>,
    non2xx: u64,
    errors: u64,
    bytes: u64,
    /// Open loop: requests sent more than an interval after they were due.
    late: u64,
}

/// One connection's loop until `end`; `every` is its interval when open
/// loop.
async fn drive(opts: Arc<Opts>, start: Instant, end: Instant, every: Option<Duration>) -> Seen {
    let mut seen = Seen::default();
    let Ok(mut sender) = connect(&opts.addr).await else {
        seen.errors += 1;
        return seen;
    };
    let mut due = start;
    loop {
        if every.is_some() {
            tokio::time::sleep_until(due.into()).await;
        }
        let t0 = Instant::now();
        if t0 >= end {
            return seen;
        }
        if let Some(every) = every {
            // Late by a whole interval: the previous request held this one.
            if t0 > due + every {
                seen.late += 1;
            }
            due += every;
        }
        let resp = match sender.send_request(request(&opts, false)).await {
            Ok(resp) => resp,
            Err(e) => {
                eprintln!("send: {e:?}");
                seen.errors += 1;
                return seen;
            }
        };
        if !resp.status().is_success() {
            seen.non2xx += 1;
        }
        let mut body = resp.into_body();
        let mut first = None;
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => {
                    eprintln!("body: {e:?}");
                    seen.errors += 1;
                    return seen;
                }
            };
            if let Some(data) = frame.data_ref() {
                first.get_or_insert_with(Instant::now);
                seen.bytes += data.len() as u64;
            }
        }
        let done = Instant::now();
        if done > end {
            return seen;
        }
        let micros = |t: Instant| u32::try_from((t - t0).as_micros()).unwrap_or(u32::MAX);
        seen.ttfb.push(micros(first.unwrap_or(done)));
        seen.total.push(micros(done));
    }
}

/// The `p` percentile of sorted `xs`.
fn pct(xs: &[u32], p: f64) -> u32 {
    if xs.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[i.clamp(1, xs.len()) - 1]
}

async fn load(opts: &Opts) -> anyhow::Result<()> {
    let opts = Arc::new(Opts {
        addr: opts.addr.clone(),
        body: opts.body.clone(),
        ..*opts
    });
    let every = opts
        .rate
        .map(|r| Duration::from_secs_f64(opts.conns as f64 / r));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(opts.secs);
    let tasks: Vec<_> = (0..opts.conns)
        .map(|i| {
            // Open loop: the connections' schedules spread over one interval.
            let offset = every.map_or(Duration::ZERO, |e| e * i as u32 / opts.conns as u32);
            tokio::spawn(drive(opts.clone(), start + offset, end, every))
        })
        .collect();
    let mut all = Seen::default();
    for task in tasks {
        let seen = task.await?;
        all.ttfb.extend(seen.ttfb);
        all.total.extend(seen.total);
        all.non2xx += seen.non2xx;
        all.errors += seen.errors;
        all.bytes += seen.bytes;
        all.late += seen.late;
    }
    let took = start.elapsed().min(end - start);
    all.ttfb.sort_unstable();
    all.total.sort_unstable();
    let mean = all.total.iter().map(|&x| f64::from(x)).sum::<f64>() / all.total.len().max(1) as f64;
    println!(
        "{{\"requests\":{},\"duration_us\":{},\"bytes\":{},\"connect\":0,\"read\":{},\"write\":0,\
         \"status\":{},\"timeout\":0,\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"max_us\":{},\
         \"mean_us\":{mean:.1},\"ttfb_p50_us\":{},\"ttfb_p90_us\":{},\"ttfb_p99_us\":{},\"late\":{}}}",
        all.total.len(),
        took.as_micros(),
        all.bytes,
        all.errors,
        all.non2xx,
        pct(&all.total, 50.0),
        pct(&all.total, 90.0),
        pct(&all.total, 99.0),
        all.total.last().copied().unwrap_or(0),
        pct(&all.ttfb, 50.0),
        pct(&all.ttfb, 90.0),
        pct(&all.ttfb, 99.0),
        all.late,
    );
    Ok(())
}

/// Opens one held stream and waits for its first event; the response is
/// kept (and with it the connection) until the process ends.
async fn open_held(
    opts: &Opts,
) -> anyhow::Result<(client_http1::SendRequest<Full<Bytes>>, Incoming)> {
    let mut sender = connect(&opts.addr).await?;
    let resp = sender.send_request(request(opts, true)).await?;
    if !resp.status().is_success() {
        bail!("status {}", resp.status());
    }
    let mut body = resp.into_body();
    loop {
        match body.frame().await {
            Some(Ok(frame)) if frame.is_data() => return Ok((sender, body)),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => bail!("the stream ended"),
        }
    }
}

async fn hold(opts: &Opts) -> anyhow::Result<()> {
    let opened = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(opts.conns);
    let opts = Arc::new(Opts {
        addr: opts.addr.clone(),
        body: opts.body.clone(),
        ..*opts
    });
    for _ in 0..opts.conns {
        let (opts, opened, failed, tx) = (opts.clone(), opened.clone(), failed.clone(), tx.clone());
        tokio::spawn(async move {
            match open_held(&opts).await {
                Ok(kept) => {
                    opened.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(()).await;
                    std::future::pending::<()>().await;
                    drop(kept);
                }
                Err(e) => {
                    if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("a stream failed: {e:#}");
                    }
                    let _ = tx.send(()).await;
                }
            }
        });
    }
    drop(tx);
    for _ in 0..opts.conns {
        rx.recv().await;
    }
    println!(
        "ready {} {}",
        opened.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    std::future::pending::<()>().await;
    Ok(())
}
