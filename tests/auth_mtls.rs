//! Client certificates through the real binary
//! (docs/configuration/consumers.md, `server.tls.client_auth`): a TLS
//! listener asking for certificates chained to a client CA, required or
//! optional; a certificate of another CA refused either way; the consumer
//! read from the certificate's SAN DNS name, SAN URI or subject CN; a name
//! that is not printable ASCII without spaces an invalid credential.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use common::gateway::LISTEN2;
use common::pki::Pki;
use common::{dedent, Echo, Gateway, OneRoute};

/// The SAN URI of the client certificate (a SPIFFE ID).
const SPIFFE: &str = "spiffe://example.org/ns/prod/sa/billing";

/// The certificates of one test: the gateway's (server PKI), a client's
/// (client CA: SAN DNS, SAN URI, CN), one with a CN only, and one from
/// another CA.
struct Certs {
    server_pki: Pki,
    server: (PathBuf, PathBuf),
    client_pki: Pki,
    client: (PathBuf, PathBuf),
    cn_only: (PathBuf, PathBuf),
    _other_pki: Pki,
    stranger: (PathBuf, PathBuf),
}

fn client_params(dns: &[&str], uri: Option<&str>, cn: &str) -> CertificateParams {
    let mut p =
        CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    if let Some(uri) = uri {
        p.subject_alt_names
            .push(SanType::URI(uri.try_into().unwrap()));
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p
}

impl Certs {
    fn new() -> Certs {
        let server_pki = Pki::new();
        let server = server_pki.issue(&["localhost"], "server");
        let client_pki = Pki::new();
        let client = client_pki.issue_params(
            client_params(
                &["billing.example.com", "b.example.com"],
                Some(SPIFFE),
                "billing-cn",
            ),
            "client",
        );
        let cn_only = client_pki.issue_params(client_params(&[], None, "cn-only"), "cn-only");
        let other_pki = Pki::new();
        let stranger = other_pki.issue_params(
            client_params(&["billing.example.com"], Some(SPIFFE), "billing-cn"),
            "stranger",
        );
        Certs {
            server_pki,
            server,
            client_pki,
            client,
            cn_only,
            _other_pki: other_pki,
            stranger,
        }
    }

    /// A gateway with a plain listener and a TLS one (`@LISTEN2@`) asking
    /// for client certificates (`required`), the consumer read from
    /// `field`; route `all` requires mTLS, `/open` does not.
    async fn gateway(&self, echo: &Echo, required: bool, field: &str) -> Gateway {
        let config = OneRoute::proxy(echo)
            .matching("{ path: /api }")
            .route_keys("auth: { require: [mtls] }")
            .route("{ name: open, match: { path: /open }, upstream: e }")
            .server(&format!(
                "tls:\n  listen: [\"@LISTEN2@\"]\n  certificates: [{{ cert: \"{}\", key: \"{}\" }}]\n  client_auth: {{ ca: \"{}\", required: {required} }}\n",
                self.server.0.display(),
                self.server.1.display(),
                self.client_pki.ca().display()
            ))
            .config()
            + &dedent(&format!(
                r#"
                consumers:
                  mtls: {{ consumer: {field} }}
                  identity_headers: {{ consumer: x-consumer, tenant: x-tenant }}
                  list:
                    - {{ name: billing.example.com, tenant: finance }}
                "#
            ));
        Gateway::start(&config).await
    }
}

/// `GET path` over TLS to `addr`, presenting `cert` (a (cert, key) pair) or
/// none; the status and the `x-consumer`/`x-tenant` the upstream saw are
/// read by the caller. `Err` when the handshake or the request fails.
async fn get(
    certs: &Certs,
    addr: SocketAddr,
    cert: Option<&(PathBuf, PathBuf)>,
    path: &str,
) -> Result<u16, String> {
    exchange(certs, addr, cert, path, false).await
}

/// [`get`] over HTTP/2 (ALPN `h2`) when `h2`.
async fn exchange(
    certs: &Certs,
    addr: SocketAddr,
    cert: Option<&(PathBuf, PathBuf)>,
    path: &str,
    h2: bool,
) -> Result<u16, String> {
    exchange_body(certs, addr, cert, path, h2)
        .await
        .map(|(status, _)| status)
}

/// [`exchange`], with the response body.
async fn exchange_body(
    certs: &Certs,
    addr: SocketAddr,
    cert: Option<&(PathBuf, PathBuf)>,
    path: &str,
    h2: bool,
) -> Result<(u16, Bytes), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(certs.server_pki.roots());
    let mut config = match cert {
        Some((c, k)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(c)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            builder
                .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(k).unwrap())
                .unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from("localhost").unwrap();
        let tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        if h2 != (tls.get_ref().1.alpn_protocol() == Some(b"h2")) {
            return Err("ALPN did not pick the protocol asked for".into());
        }
        let io = TokioIo::new(tls);
        let resp = if h2 {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(conn);
            let req = Request::get(format!("https://localhost{path}"))
                .header("x-consumer", "forged")
                .body(Empty::<Bytes>::new())
                .unwrap();
            sender.send_request(req).await
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("h1 handshake: {e}"))?;
            tokio::spawn(conn);
            let req = Request::get(path)
                .header("host", "localhost")
                .header("x-consumer", "forged")
                .body(Empty::<Bytes>::new())
                .unwrap();
            sender.send_request(req).await
        }
        .map_err(|e| format!("request: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "timed out".to_string())?
}

/// The consumer and tenant the upstream saw last.
fn seen(echo: &Echo) -> (Option<String>, Option<String>) {
    let r = echo.last().unwrap();
    (r.header("x-consumer"), r.header("x-tenant"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_client_certificates() {
    let certs = Certs::new();
    let echo = Echo::start("e").await;
    let gw = certs.gateway(&echo, true, "san_dns").await;
    let addr = gw.bound_addr(LISTEN2);

    assert_eq!(
        get(&certs, addr, Some(&certs.client), "/api").await,
        Ok(200)
    );
    assert_eq!(
        seen(&echo),
        (Some("billing.example.com".into()), Some("finance".into()))
    );
    // Over HTTP/2 too (ALPN h2 with client certificates).
    assert_eq!(
        exchange(&certs, addr, Some(&certs.client), "/api", true).await,
        Ok(200)
    );
    assert_eq!(seen(&echo).0.as_deref(), Some("billing.example.com"));
    assert_eq!(echo.last().unwrap().header_all("x-consumer").len(), 1);
    // No certificate, or one of another CA: no exchange at all.
    for (what, cert) in [
        ("no certificate", None),
        ("another CA", Some(&certs.stranger)),
    ] {
        let r = get(&certs, addr, cert, "/open").await;
        assert!(r.is_err(), "{what}: {r:?}");
    }
    assert_eq!(echo.count(), 2);
    // The plain listener has no certificate to offer: 401 on the mTLS route.
    let r = common::client::get(gw.addr(), "/api").await;
    r.assert_error(401, "unauthorized");
    assert_eq!(echo.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_client_certificates() {
    let certs = Certs::new();
    let echo = Echo::start("e").await;
    let gw = certs.gateway(&echo, false, "san_dns").await;
    let addr = gw.bound_addr(LISTEN2);

    // Without a certificate: the handshake succeeds; the mTLS route wants
    // one, the open route forwards without identity.
    assert_eq!(get(&certs, addr, None, "/api").await, Ok(401));
    assert_eq!(get(&certs, addr, None, "/open").await, Ok(200));
    assert_eq!(seen(&echo), (None, None));
    // A certificate that is presented must verify.
    let r = get(&certs, addr, Some(&certs.stranger), "/open").await;
    assert!(r.is_err(), "another CA's certificate: {r:?}");
    assert_eq!(
        get(&certs, addr, Some(&certs.client), "/api").await,
        Ok(200)
    );
    assert_eq!(seen(&echo).0.as_deref(), Some("billing.example.com"));
    // On a route without auth the verified consumer is named too.
    assert_eq!(
        get(&certs, addr, Some(&certs.client), "/open").await,
        Ok(200)
    );
    assert_eq!(seen(&echo).0.as_deref(), Some("billing.example.com"));
    assert_eq!(echo.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_comes_from_the_configured_name() {
    let certs = Certs::new();
    let echo = Echo::start("e").await;
    for (field, consumer, tenant) in [
        ("san_dns", "billing.example.com", Some("finance")),
        ("san_uri", SPIFFE, None),
        ("subject_cn", "billing-cn", None),
    ] {
        let gw = certs.gateway(&echo, true, field).await;
        let addr = gw.bound_addr(LISTEN2);
        assert_eq!(
            get(&certs, addr, Some(&certs.client), "/api").await,
            Ok(200),
            "{field}"
        );
        assert_eq!(
            seen(&echo),
            (Some(consumer.to_string()), tenant.map(str::to_string)),
            "{field}"
        );
        // A certificate without that name is an invalid credential.
        let cn_only = get(&certs, addr, Some(&certs.cn_only), "/api").await;
        let want = if field == "subject_cn" { 200 } else { 401 };
        assert_eq!(cn_only, Ok(want), "{field}: a certificate with a CN only");
        let line = gw
            .wait_access_log(field, |v| v["consumer"] == consumer)
            .await;
        assert_eq!(line["status"], 200, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_is_not_printable_ascii_is_an_invalid_credential() {
    let certs = Certs::new();
    let echo = Echo::start("e").await;
    let gw = certs.gateway(&echo, false, "subject_cn").await;
    let addr = gw.bound_addr(LISTEN2);
    let issue = |cn: &str, file: &str| {
        certs
            .client_pki
            .issue_params(client_params(&["ok.example.com"], None, cn), file)
    };
    let spaced = issue("billing team", "spaced");
    let accented = issue("bïlling", "accented");
    for (what, cert) in [("a space", &spaced), ("non-ASCII", &accented)] {
        // On a route that requires mTLS: 401 invalid_credentials.
        let (status, body) = exchange_body(&certs, addr, Some(cert), "/api", false)
            .await
            .unwrap();
        assert_eq!(status, 401, "{what}");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "invalid_credentials", "{what}: {body}");
        // Without auth: forwarded, with no consumer (nor the name).
        let before = echo.count();
        assert_eq!(
            get(&certs, addr, Some(cert), "/open").await,
            Ok(200),
            "{what}"
        );
        assert_eq!(echo.count(), before + 1, "{what}");
        assert_eq!(seen(&echo), (None, None), "{what}");
    }
    assert_eq!(echo.count(), 2, "the refused requests reached nothing");
    let line = gw
        .wait_access_log("the refusal", |v| v["status"] == 401)
        .await;
    assert_eq!(line["consumer"], serde_json::Value::Null, "{line}");
    // The same CA's printable name passes: the name, not the chain, failed.
    let named = issue("billing-team", "named");
    assert_eq!(get(&certs, addr, Some(&named), "/api").await, Ok(200));
    assert_eq!(seen(&echo).0.as_deref(), Some("billing-team"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_client_ca() {
    let certs = Certs::new();
    let echo = Echo::start("e").await;
    let gw = certs.gateway(&echo, true, "san_dns").await;
    let addr = gw.bound_addr(LISTEN2);
    assert_eq!(
        get(&certs, addr, Some(&certs.client), "/api").await,
        Ok(200)
    );
    assert!(get(&certs, addr, Some(&certs.stranger), "/api")
        .await
        .is_err());
    // The other CA in place of the client CA.
    let other_ca = certs.stranger.0.parent().unwrap().join("ca.pem");
    let config = std::fs::read_to_string(gw.config_path()).unwrap().replace(
        &certs.client_pki.ca().display().to_string(),
        &other_ca.display().to_string(),
    );
    gw.rewrite_config(&config);
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(get(&certs, addr, Some(&certs.client), "/api")
        .await
        .is_err());
    assert_eq!(
        get(&certs, addr, Some(&certs.stranger), "/api").await,
        Ok(200)
    );
    assert_eq!(seen(&echo).0.as_deref(), Some("billing.example.com"));
    // An unreadable CA on reload changes nothing.
    let broken = config.replace(&other_ca.display().to_string(), "/nonexistent/ca.pem");
    gw.rewrite_config(&broken);
    let r = gw.admin_post("/reload").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("client_auth.ca"), "{}", r.text());
    assert_eq!(
        get(&certs, addr, Some(&certs.stranger), "/api").await,
        Ok(200)
    );
}
