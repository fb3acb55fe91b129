//! TLS through the real binary (docs/configuration/, docs/protocols.md `server.tls`): certificates
//! made here (rcgen, plus openssl for PKCS#1 and SEC1 keys), SNI over two
//! certificates (a wildcard one), the default certificate without SNI,
//! ALPN `h2` and `http/1.1` on one listener, TLS 1.2 and 1.3,
//! `X-Forwarded-Proto: https`, the handshake bounded by `header_read`,
//! certificates re-read on reload (a bad pair changes nothing), `tollgate
//! check` naming the file, curl over TLS and h2, and `https://` upstreams
//! (`tls.ca`, `verify: false`, `server_name`, mutual TLS, h2 by ALPN,
//! pooled connections reused).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{client::TlsStream, TlsAcceptor, TlsConnector};

use common::gateway::{run_cli, temp_dir};
use common::one_route::targets;
use common::pki::{der_of, Pki};
use common::upstream::Echo;
use common::OneRoute;

/// Where the TLS listener is configured (its bound port is read back).
const TLS_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::new(127, 0, 0, 5),
    0,
));

/// Accepts any certificate: the tests look at which one was presented.
#[derive(Debug)]
struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How a test client connects.
struct Hello<'a> {
    /// SNI; `None` connects by IP (rustls then sends none).
    sni: Option<&'a str>,
    alpn: &'a [&'a [u8]],
    versions: &'a [&'static rustls::SupportedProtocolVersion],
    /// Verify against these roots; `None` accepts any certificate.
    roots: Option<rustls::RootCertStore>,
}

impl Default for Hello<'_> {
    fn default() -> Self {
        Hello {
            sni: None,
            alpn: &[],
            versions: rustls::DEFAULT_VERSIONS,
            roots: None,
        }
    }
}

async fn handshake(addr: SocketAddr, hello: Hello<'_>) -> std::io::Result<TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(hello.versions)
        .unwrap();
    let mut config = match hello.roots {
        Some(roots) => builder.with_root_certificates(roots).with_no_client_auth(),
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert))
            .with_no_client_auth(),
    };
    config.alpn_protocols = hello.alpn.iter().map(|p| p.to_vec()).collect();
    let name = match hello.sni {
        Some(n) => ServerName::try_from(n.to_owned()).unwrap(),
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let tcp = TcpStream::connect(addr).await?;
    tokio::time::timeout(
        Duration::from_secs(5),
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("handshake timed out"))?
}

/// The leaf certificate the server presented.
fn presented(tls: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

/// `GET path` on an established TLS stream, over h2 when ALPN said so;
/// (status, version, body).
async fn get(tls: TlsStream<TcpStream>, host: &str, path: &str) -> (u16, Version, String) {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let response = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::get(format!("https://{host}{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(req).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let req = Request::get(path)
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(req).await.unwrap()
    };
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status.as_u16(),
        parts.version,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// A gateway with a TLS listener serving `certificates` in front of `echo`.
fn tls_gateway(certificates: &[(PathBuf, PathBuf)], echo: &Echo) -> OneRoute {
    let certs: String = certificates
        .iter()
        .map(|(c, k)| {
            format!(
                "\n    - {{ cert: \"{}\", key: \"{}\" }}",
                c.display(),
                k.display()
            )
        })
        .collect();
    OneRoute::new()
        .named("e")
        .upstream_at("echo", &targets(&[echo]))
        .server(&format!(
            "tls:\n  listen: [\"{TLS_LISTEN}\"]\n  certificates:{certs}\n"
        ))
}

#[tokio::test]
async fn sni_chooses_the_certificate_and_alpn_the_protocol() {
    let pki = Pki::new();
    let a = pki.issue(&["a.example.com"], "a");
    let b = pki.issue(&["*.b.example.com", "c.example.com"], "b");
    let echo = Echo::start("echo").await;
    let gw = tls_gateway(&[a.clone(), b.clone()], &echo).start().await;
    let addr = gw.bound_addr(TLS_LISTEN);

    for (sni, expected) in [
        (Some("a.example.com"), &a),
        (Some("x.b.example.com"), &b),
        (Some("c.example.com"), &b),
        (Some("b.example.com"), &a), // `*.b.example.com` does not cover it: the default
        (Some("unknown.test"), &a),
        (None, &a), // no SNI: the first certificate
    ] {
        let tls = handshake(
            addr,
            Hello {
                sni,
                ..Hello::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(presented(&tls), der_of(&expected.0), "SNI {sni:?}");
    }

    // Verified against the CA, as a real client would.
    let verified = Hello {
        sni: Some("x.b.example.com"),
        roots: Some(pki.roots()),
        ..Hello::default()
    };
    handshake(addr, verified)
        .await
        .expect("a verified handshake");

    // ALPN: h2 when offered, HTTP/1.1 otherwise, on the same listener.
    let h2 = Hello {
        sni: Some("a.example.com"),
        alpn: &[b"h2", b"http/1.1"],
        ..Hello::default()
    };
    let tls = handshake(addr, h2).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (status, version, _) = get(tls, "a.example.com", "/h2").await;
    assert_eq!((status, version), (200, Version::HTTP_2));
    let seen = echo.last().unwrap();
    assert_eq!(seen.header("x-forwarded-proto").as_deref(), Some("https"));

    for alpn in [&[&b"http/1.1"[..]][..], &[]] {
        let hello = Hello {
            sni: Some("a.example.com"),
            alpn,
            ..Hello::default()
        };
        let tls = handshake(addr, hello).await.unwrap();
        let (status, version, _) = get(tls, "a.example.com", "/h1").await;
        assert_eq!((status, version), (200, Version::HTTP_11), "ALPN {alpn:?}");
        assert_eq!(
            echo.last().unwrap().header("x-forwarded-proto").as_deref(),
            Some("https")
        );
    }

    // TLS 1.2 and 1.3 both.
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let hello = Hello {
            sni: Some("a.example.com"),
            versions: &[version],
            ..Hello::default()
        };
        let tls = handshake(addr, hello).await.unwrap();
        assert_eq!(
            tls.get_ref().1.protocol_version(),
            Some(version.version),
            "{version:?}"
        );
        assert_eq!(get(tls, "a.example.com", "/v").await.0, 200);
    }

    // The plain listener stays plain: `X-Forwarded-Proto: http` there.
    let r = common::client::get(gw.addr(), "/plain").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        echo.last().unwrap().header("x-forwarded-proto").as_deref(),
        Some("http")
    );
}

#[tokio::test]
async fn the_handshake_is_bounded_by_header_read() {
    let pki = Pki::new();
    let a = pki.issue(&["a.example.com"], "a");
    let echo = Echo::start("echo").await;
    let gw = tls_gateway(&[a], &echo)
        .server("timeouts: { header_read: 500ms, idle: 60s }")
        .start()
        .await;
    let addr = gw.bound_addr(TLS_LISTEN);
    // A client that connects and never says hello, and one that stops half
    // way through its ClientHello.
    for partial in [&b""[..], &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..]] {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(partial).await.unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("closed within 5 s");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(2500),
            "closed after {took:?}"
        );
    }
}

#[tokio::test]
async fn certificates_are_reread_on_reload_and_a_bad_pair_changes_nothing() {
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["a.example.com"], "a");
    let echo = Echo::start("echo").await;
    let gw = tls_gateway(&[(cert.clone(), key.clone())], &echo)
        .start()
        .await;
    let addr = gw.bound_addr(TLS_LISTEN);
    let hello = || Hello {
        sni: Some("a.example.com"),
        ..Hello::default()
    };
    let first = presented(&handshake(addr, hello()).await.unwrap());
    assert_eq!(first, der_of(&cert));

    // Renewed files, same paths: POST /reload serves the new certificate.
    let (new_cert, new_key) = pki.issue(&["a.example.com"], "renewed");
    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let renewed = presented(&handshake(addr, hello()).await.unwrap());
    assert_eq!(renewed, der_of(&new_cert));
    assert_ne!(renewed, first);

    // A key that is not the certificate's: the reload fails, naming the
    // file, and the renewed certificate keeps serving.
    let (_, other_key) = pki.issue(&["a.example.com"], "other");
    std::fs::copy(&other_key, &key).unwrap();
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 400, "{}", r.text());
    let error = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("server.tls.certificates[0].key")
            && error.contains(&key.display().to_string())
            && error.contains("does not match"),
        "{error}"
    );
    assert_eq!(presented(&handshake(addr, hello()).await.unwrap()), renewed);
    assert_eq!(
        gw.config_state().await["last_error"].as_str(),
        Some(error.as_str())
    );

    // An unreadable certificate fails SIGHUP's reload the same way.
    std::fs::copy(&new_key, &key).unwrap();
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let generation = gw.generation().await;
    gw.sighup();
    common::eventually(Duration::from_secs(5), "the failed reload", || async {
        let state = gw.config_state().await;
        state["last_error"]
            .as_str()
            .filter(|e| e.contains("server.tls.certificates[0].cert"))
            .map(str::to_owned)
    })
    .await;
    assert_eq!(gw.generation().await, generation);
    assert_eq!(presented(&handshake(addr, hello()).await.unwrap()), renewed);
}

/// Runs openssl; the tests need it for PKCS#1 and SEC1 keys (tests/run
/// installs it when missing).
fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn check_loads_the_pem_forms_and_names_a_bad_file() {
    let pki = Pki::new();
    let echo = Echo::start("echo").await;
    let d = &pki.dir;
    // An RSA key as PKCS#1 and an EC key as SEC1, each with its certificate.
    let rsa = d.join("rsa.key");
    let ec = d.join("ec.key");
    openssl(&[
        "genrsa",
        "-traditional",
        "-out",
        rsa.to_str().unwrap(),
        "2048",
    ]);
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        ec.to_str().unwrap(),
    ]);
    assert!(std::fs::read_to_string(&rsa)
        .unwrap()
        .contains("BEGIN RSA PRIVATE KEY"));
    assert!(std::fs::read_to_string(&ec)
        .unwrap()
        .contains("BEGIN EC PRIVATE KEY"));
    let mut pairs = Vec::new();
    for (key, name) in [(&rsa, "rsa.example.com"), (&ec, "ec.example.com")] {
        let cert = d.join(format!("{name}.pem"));
        openssl(&[
            "req",
            "-new",
            "-x509",
            "-days",
            "2",
            "-key",
            key.to_str().unwrap(),
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            &format!("subjectAltName=DNS:{name}"),
            "-out",
            cert.to_str().unwrap(),
        ]);
        pairs.push((cert, key.clone()));
    }
    let text = tls_gateway(&pairs, &echo)
        .config()
        .replace("@LISTEN@", "127.0.0.1:0")
        .replace("@ADMIN@", "127.0.0.1:0");
    let file = d.join("gateway.yaml");
    std::fs::write(&file, &text).unwrap();
    let (code, out, err) = run_cli(&["check", "-c", file.to_str().unwrap()], &[], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 listener(s)"), "{out}");

    // Both serve.
    let gw = tls_gateway(&pairs, &echo).start().await;
    let addr = gw.bound_addr(TLS_LISTEN);
    for (name, pair) in [
        ("rsa.example.com", &pairs[0]),
        ("ec.example.com", &pairs[1]),
    ] {
        let tls = handshake(
            addr,
            Hello {
                sni: Some(name),
                ..Hello::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(presented(&tls), der_of(&pair.0), "{name}");
    }

    // A missing key file: one line naming the field and the file.
    let missing = d.join("missing.key");
    let broken = text.replace(&ec.display().to_string(), &missing.display().to_string());
    std::fs::write(&file, broken).unwrap();
    let (code, out, err) = run_cli(&["check", "-c", file.to_str().unwrap()], &[], None);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("server.tls.certificates[1].key")
            && err.contains(&missing.display().to_string())
            && err.contains("cannot read"),
        "{err}"
    );
}

#[tokio::test]
async fn curl_speaks_tls_and_h2_to_it() {
    let pki = Pki::new();
    let a = pki.issue(&["a.example.com"], "a");
    let echo = Echo::start("echo").await;
    let gw = tls_gateway(&[a], &echo).start().await;
    let addr = gw.bound_addr(TLS_LISTEN);
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let out = tokio::process::Command::from(common::reaper::command("curl"))
            .args(["-sS", "--max-time", "10", flag, "--cacert"])
            .arg(pki.ca())
            .args([
                "--resolve",
                &format!("a.example.com:{}:{}", addr.port(), addr.ip()),
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                &format!("https://a.example.com:{}/curl", addr.port()),
            ])
            .output()
            .await
            .expect("curl (apt-get install curl)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout,
            format!("200 {version}"),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An HTTPS upstream: answers every request 200 with its HTTP version,
/// counting the TLS connections it accepted; with `client_roots`, it
/// requires a client certificate they sign.
struct TlsUpstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    versions: Arc<Mutex<Vec<Version>>>,
}

async fn tls_upstream(
    cert: &Path,
    key: &Path,
    client_roots: Option<rustls::RootCertStore>,
) -> TlsUpstream {
    use rustls::pki_types::pem::PemObject;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_roots {
        Some(roots) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap(),
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let versions = Arc::new(Mutex::new(Vec::new()));
    let (conns, seen) = (connections.clone(), versions.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, conns, seen) = (acceptor.clone(), conns.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                conns.fetch_add(1, Ordering::SeqCst);
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    seen.lock().unwrap().push(req.version());
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"hello over tls"),
                        )))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    TlsUpstream {
        addr,
        connections,
        versions,
    }
}

/// A gateway forwarding `/` to upstream `up`: `target`.
fn proxy_to(target: &str) -> OneRoute {
    OneRoute::new().upstream_at("up", &format!("[\"{target}\"]"))
}

#[tokio::test]
async fn https_upstreams_are_verified_and_their_connections_pooled() {
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["localhost", "127.0.0.1"], "upstream");
    let up = tls_upstream(&cert, &key, None).await;
    let target = format!("https://127.0.0.1:{}", up.addr.port());

    // Trusted through tls.ca: ten requests, one TLS connection (on one
    // worker thread: idle upstream connections are kept per thread).
    let ca = format!("tls: {{ ca: \"{}\" }}", pki.ca().display());
    let gw = proxy_to(&target).upstream_keys(&ca).start_workers(1).await;
    for _ in 0..10 {
        let r = common::client::get(gw.addr(), "/").await;
        assert_eq!(
            (r.status.as_u16(), r.text().as_str()),
            (200, "hello over tls")
        );
    }
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "pooled and reused"
    );
    assert!(up
        .versions
        .lock()
        .unwrap()
        .iter()
        .all(|v| *v == Version::HTTP_11));
    drop(gw);

    // h2 by ALPN when `http2: true`.
    let gw = proxy_to(&target)
        .upstream_keys(&ca)
        .upstream_keys("http2: true")
        .start()
        .await;
    assert_eq!(common::client::get(gw.addr(), "/").await.status, 200);
    assert_eq!(up.versions.lock().unwrap().last(), Some(&Version::HTTP_2));
    drop(gw);

    // Without the CA: not trusted, 502.
    let gw = proxy_to(&target).start().await;
    common::client::get(gw.addr(), "/")
        .await
        .assert_error(502, "upstream_unavailable");
    drop(gw);

    // `verify: false` trusts anything (and `check` warns).
    let self_signed = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let dir = temp_dir("tls-self");
    let (sc, sk) = (dir.join("self.pem"), dir.join("self.key"));
    std::fs::write(&sc, self_signed.cert.pem()).unwrap();
    std::fs::write(&sk, self_signed.signing_key.serialize_pem()).unwrap();
    let odd = tls_upstream(&sc, &sk, None).await;
    let gw = proxy_to(&format!("https://127.0.0.1:{}", odd.addr.port()))
        .upstream_keys("tls: { verify: false }")
        .start()
        .await;
    assert_eq!(common::client::get(gw.addr(), "/").await.status, 200);
    let (code, out, _) = run_cli(
        &["check", "-c", gw.config_path().to_str().unwrap()],
        &[],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains("upstreams.up.tls.verify: false"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn server_name_and_mutual_tls() {
    let pki = Pki::new();
    // A certificate for a name the target's address is not.
    let (cert, key) = pki.issue(&["users.internal"], "named");
    let up = tls_upstream(&cert, &key, None).await;
    let target = format!("https://127.0.0.1:{}", up.addr.port());
    let ca = pki.ca().display().to_string();
    let gw = proxy_to(&target)
        .upstream_keys(&format!("tls: {{ ca: \"{ca}\" }}"))
        .start()
        .await;
    common::client::get(gw.addr(), "/")
        .await
        .assert_error(502, "upstream_unavailable");
    drop(gw);
    let gw = proxy_to(&target)
        .upstream_keys(&format!(
            "tls: {{ ca: \"{ca}\", server_name: users.internal }}"
        ))
        .start()
        .await;
    assert_eq!(common::client::get(gw.addr(), "/").await.status, 200);
    drop(gw);

    // An upstream that wants a client certificate signed by the CA.
    let (cert, key) = pki.issue(&["127.0.0.1"], "mtls-server");
    let strict = tls_upstream(&cert, &key, Some(pki.roots())).await;
    let target = format!("https://127.0.0.1:{}", strict.addr.port());
    let gw = proxy_to(&target)
        .upstream_keys(&format!("tls: {{ ca: \"{ca}\" }}"))
        .start()
        .await;
    common::client::get(gw.addr(), "/")
        .await
        .assert_error(502, "upstream_unavailable");
    drop(gw);
    let (client_cert, client_key) = pki.issue(&["gateway.internal"], "client");
    let gw = proxy_to(&target)
        .upstream_keys(&format!(
            "tls: {{ ca: \"{ca}\", cert: \"{}\", key: \"{}\" }}",
            client_cert.display(),
            client_key.display()
        ))
        .start()
        .await;
    let r = common::client::get(gw.addr(), "/").await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (200, "hello over tls")
    );
}
