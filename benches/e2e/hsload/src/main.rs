//! hsload: new TLS connections per second, every request on a connection of
//! its own with a full handshake.
//!
//!     hsload [--ca CERT.pem] [--sni NAME] [-c CONNS] [-d SECONDS] ADDR [PATH]
//!
//! CONNS tasks (default 64) on one thread each loop: TCP connect, a full TLS
//! 1.3 handshake (rustls with ring, session resumption disabled, so no
//! ticket or session id is ever offered), one `GET PATH HTTP/1.1` with
//! `Connection: close`, the response read until the server closes. Why not
//! wrk or h2load with `Connection: close`: both keep the OpenSSL session
//! of the previous connection and resume it (NGINX's `$ssl_session_reused`
//! said `r` for all but the first connection of each client), so they
//! measure resumptions, not handshakes; `openssl s_time -new` does full
//! handshakes but one at a time per process and costs the load core about
//! twice what a server spends (OpenSSL 3.0), so the client was the limit.
//!
//! With `--ca` the client verifies the server's chain against that
//! certificate and the CertificateVerify signature, as a real client does;
//! without it, it checks neither (the server's work is the same). SNI is
//! `--sni` (default `localhost`).
//!
//! Prints one JSON line with wrk's field names (see benches/e2e/report.lua):
//! requests completed within the time, latency from the start of the TCP
//! connect to the end of the response, error counts, and what the
//! handshakes negotiated (`full` / `resumed` count handshake kinds).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Accepts any server: the client's share of the handshake without the
/// verification (the server does the same work either way).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[derive(Default)]
struct Stats {
    requests: u64,
    bytes: u64,
    connect: u64,
    handshake: u64,
    read: u64,
    write: u64,
    status: u64,
    timeout: u64,
    full: u64,
    resumed: u64,
    lat_us: Vec<u32>,
    negotiated: Option<String>,
}

struct Args {
    addr: SocketAddr,
    path: String,
    sni: String,
    ca: Option<String>,
    conns: usize,
    secs: f64,
}

fn usage() -> ! {
    eprintln!("usage: hsload [--ca CERT.pem] [--sni NAME] [-c CONNS] [-d SECONDS] ADDR [PATH]");
    std::process::exit(2)
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let (mut sni, mut ca, mut conns, mut secs) = ("localhost".to_owned(), None, 64, 8.0);
    let mut pos = Vec::new();
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--sni" => sni = val(),
            "--ca" => ca = Some(val()),
            "-c" => conns = val().parse().unwrap_or_else(|_| usage()),
            "-d" => {
                secs = val()
                    .trim_end_matches('s')
                    .parse()
                    .unwrap_or_else(|_| usage())
            }
            _ if a.starts_with('-') => usage(),
            _ => pos.push(a),
        }
    }
    if pos.is_empty() || pos.len() > 2 || conns == 0 {
        usage()
    }
    Args {
        addr: pos[0].parse().unwrap_or_else(|_| usage()),
        path: pos.get(1).cloned().unwrap_or_else(|| "/".into()),
        sni,
        ca,
        conns,
        secs,
    }
}

fn client_config(ca: Option<&str>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring");
    let mut config = match ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(path).expect("--ca: a PEM file") {
                roots
                    .add(cert.expect("--ca: a certificate"))
                    .expect("--ca: a usable root");
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth(),
    };
    config.resumption = Resumption::disabled();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Where the head ends and how long the body is, once the head is whole.
fn head_and_length(buf: &[u8]) -> Option<(usize, usize, u16)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    Some((end, len, status))
}

enum Fail {
    Connect,
    Handshake,
    Write,
    Read,
}

/// One connection, one request. Ok: status, bytes, handshake resumed,
/// what was negotiated.
async fn one(
    addr: SocketAddr,
    connector: &TlsConnector,
    name: &ServerName<'static>,
    request: &[u8],
    buf: &mut Vec<u8>,
    want_negotiated: bool,
) -> Result<(u16, usize, bool, Option<String>), Fail> {
    let tcp = TcpStream::connect(addr).await.map_err(|_| Fail::Connect)?;
    let _ = tcp.set_nodelay(true);
    let mut tls = connector
        .connect(name.clone(), tcp)
        .await
        .map_err(|_| Fail::Handshake)?;
    let (_, conn) = tls.get_ref();
    let resumed = !matches!(conn.handshake_kind(), Some(rustls::HandshakeKind::Full));
    let negotiated = want_negotiated.then(|| {
        format!(
            "{:?} {:?} {:?}, ALPN {}",
            conn.protocol_version().unwrap(),
            conn.negotiated_cipher_suite().unwrap().suite(),
            conn.negotiated_key_exchange_group()
                .map_or(rustls::NamedGroup::Unknown(0), |g| g.name()),
            conn.alpn_protocol()
                .map_or("-".into(), |p| String::from_utf8_lossy(p).into_owned()),
        )
    });
    tls.write_all(request).await.map_err(|_| Fail::Write)?;
    buf.clear();
    let mut chunk = [0u8; 16384];
    let mut complete: Option<u16> = None;
    loop {
        // The server closes after the response (Connection: close); read
        // until it does, so the client never holds a TIME_WAIT port.
        match tls.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if complete.is_none() {
                    if let Some((head, len, status)) = head_and_length(buf) {
                        if buf.len() >= head + len {
                            complete = Some(status);
                        }
                    }
                }
            }
            // A close without close_notify after a whole response is a close.
            Err(_) if complete.is_some() => break,
            Err(_) => return Err(Fail::Read),
        }
    }
    match complete {
        Some(status) => Ok((status, buf.len(), resumed, negotiated)),
        None => Err(Fail::Read),
    }
}

fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connector = TlsConnector::from(client_config(a.ca.as_deref()));
    let name = ServerName::try_from(a.sni.clone()).expect("--sni: a DNS name or an IP address");
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: hsload\r\nConnection: close\r\n\r\n",
        a.path, a.sni
    )
    .into_bytes();
    let stats = Arc::new(std::sync::Mutex::new(Stats::default()));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.secs);
    rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        for _ in 0..a.conns {
            let addr = a.addr;
            let (connector, name, request, stats) = (
                connector.clone(),
                name.clone(),
                request.clone(),
                stats.clone(),
            );
            local.spawn_local(async move {
                let mut buf = Vec::with_capacity(16384);
                let cutoff = tokio::time::Instant::from_std(deadline);
                loop {
                    let t0 = Instant::now();
                    if t0 >= deadline {
                        break;
                    }
                    let want = stats.lock().unwrap().negotiated.is_none();
                    let one = one(addr, &connector, &name, &request, &mut buf, want);
                    let res = tokio::time::timeout_at(
                        cutoff.min(tokio::time::Instant::from_std(t0 + Duration::from_secs(10))),
                        one,
                    )
                    .await;
                    let now = Instant::now();
                    let mut s = stats.lock().unwrap();
                    match res {
                        Err(_) if now >= deadline => break, // cut off by the end
                        Err(_) => s.timeout += 1,
                        Ok(Err(Fail::Connect)) => s.connect += 1,
                        Ok(Err(Fail::Handshake)) => s.handshake += 1,
                        Ok(Err(Fail::Write)) => s.write += 1,
                        Ok(Err(Fail::Read)) => s.read += 1,
                        Ok(Ok((status, bytes, resumed, negotiated))) => {
                            s.requests += 1;
                            s.bytes += bytes as u64;
                            if status > 399 || status < 200 {
                                s.status += 1;
                            }
                            if resumed {
                                s.resumed += 1;
                            } else {
                                s.full += 1;
                            }
                            if s.negotiated.is_none() {
                                s.negotiated = negotiated;
                            }
                            s.lat_us
                                .push((now - t0).as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                }
            });
        }
        local.await;
    });
    let dur_us = (Instant::now().min(deadline) - start).as_micros();
    let mut s = std::mem::take(&mut *stats.lock().unwrap());
    s.lat_us.sort_unstable();
    let mean = if s.lat_us.is_empty() {
        0.0
    } else {
        s.lat_us.iter().map(|&x| x as f64).sum::<f64>() / s.lat_us.len() as f64
    };
    let negotiated = s.negotiated.unwrap_or_default().replace('"', "'");
    println!(
        "{{\"requests\":{},\"duration_us\":{},\"bytes\":{},\"connect\":{},\"handshake\":{},\"read\":{},\"write\":{},\"status\":{},\"timeout\":{},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"max_us\":{},\"mean_us\":{:.1},\"full\":{},\"resumed\":{},\"negotiated\":\"{}\"}}",
        s.requests,
        dur_us,
        s.bytes,
        s.connect,
        s.handshake,
        s.read,
        s.write,
        s.status,
        s.timeout,
        pct(&s.lat_us, 50.0),
        pct(&s.lat_us, 90.0),
        pct(&s.lat_us, 99.0),
        s.lat_us.last().copied().unwrap_or(0),
        mean,
        s.full,
        s.resumed,
        negotiated,
    );
}
