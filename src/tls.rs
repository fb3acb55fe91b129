//! TLS with rustls (docs/configuration/, docs/protocols.md `server.tls`): the listeners' server
//! config (certificates chosen by SNI, ALPN `h2` and `http/1.1`, client
//! certificates checked against `server.tls.client_auth.ca`, see
//! docs/configuration/tls.md) and the upstreams' client config (system
//! roots plus `tls.ca`, `server_name`, `verify: false`, a client
//! certificate).
//!
//! The crypto provider is *ring*: it builds with a C compiler alone (no
//! cmake, no Go, which aws-lc-rs needs), so `cargo build` works on any
//! machine the project supports; its AES-GCM and ChaCha20 are assembly. A
//! full TLS 1.3 handshake with an ECDSA P-256 certificate costs it about
//! half the CPU NGINX with OpenSSL spends (`benches/e2e/run --only tls`).
//!
//! Certificates and keys are PEM (PKCS#8, PKCS#1 and SEC1 keys), read when a
//! runtime is built: at start-up, by `tollgate check`, and at every reload,
//! so renewed files are picked up by SIGHUP; a file that cannot be read or
//! a key that does not match its certificate fails the whole build, and the
//! previous runtime's certificates keep serving. The client CA is read the
//! same way, so a renewed CA file also takes effect on reload.
//!
//! Client certificates are verified by rustls' webpki verifier: chained to
//! one of the CA file's certificates, within their validity period, and
//! fit for client authentication (an extended key usage, when present,
//! must include it). With `required: false` a client may present none, but
//! one it presents must verify; the handshake fails otherwise.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use crate::config::{CertificateConfig, UpstreamTls};

/// ALPN protocol ids.
const H2: &[u8] = b"h2";
const HTTP11: &[u8] = b"http/1.1";

/// Why TLS material could not be loaded: the config field, the file, and
/// what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {}: {problem}", .file.display())]
pub struct TlsError {
    /// The config field naming the file (`server.tls.certificates[0].key`).
    pub field: String,
    /// The file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(default_provider())
}

/// The certificate chain in the PEM file at `path` (the end-entity first).
fn read_chain(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |problem: String| TlsError {
        field: field.to_owned(),
        file: path.to_owned(),
        problem,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(pem_problem(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(pem_problem(e)))?;
    if chain.is_empty() {
        return Err(error(
            "no certificate in it (a PEM `CERTIFICATE` block)".into(),
        ));
    }
    Ok(chain)
}

/// The private key in the PEM file at `path`: PKCS#8, PKCS#1 (RSA) or SEC1
/// (EC).
fn read_key(field: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError {
        field: field.to_owned(),
        file: path.to_owned(),
        problem: pem_problem(e),
    })
}

fn pem_problem(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(io) => format!("cannot read it: {io}"),
        Error::NoItemsFound => "no private key in it (a PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)".into(),
        other => format!("not valid PEM: {other:?}"),
    }
}

/// One certificate and key, checked to belong together.
fn certified_key(index: usize, c: &CertificateConfig) -> Result<Arc<CertifiedKey>, TlsError> {
    let cert_field = format!("server.tls.certificates[{index}].cert");
    let key_field = format!("server.tls.certificates[{index}].key");
    let chain = read_chain(&cert_field, &c.cert)?;
    let key = read_key(&key_field, &c.key)?;
    let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError {
        field: key_field,
        file: c.key.clone(),
        problem: match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "the key does not match the certificate in {}",
                c.cert.display()
            ),
            other => format!("not a usable private key: {other}"),
        },
    })?;
    // The end-entity certificate must parse, or SNI could never pick it.
    let parsed = key
        .end_entity_cert()
        .ok()
        .map(webpki::EndEntityCert::try_from);
    if !matches!(parsed, Some(Ok(_))) {
        return Err(TlsError {
            field: cert_field,
            file: c.cert.clone(),
            problem: "the first certificate is not a valid X.509 end-entity certificate".into(),
        });
    }
    Ok(Arc::new(key))
}

/// Picks a listener's certificate: the first whose names (SANs, wildcards
/// included) cover the client's SNI, else the first (also for clients that
/// send no SNI).
#[derive(Debug)]
struct BySni {
    keys: Vec<Arc<CertifiedKey>>,
}

impl BySni {
    fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let [only] = self.keys.as_slice() {
            // One certificate serves every name: no parsing per handshake.
            return Some(only.clone());
        }
        let by_name = sni
            .and_then(|name| ServerName::try_from(name.to_owned()).ok())
            .and_then(|name| {
                self.keys.iter().find(|key| {
                    key.end_entity_cert()
                        .ok()
                        .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
                        .is_some_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
                })
            });
        by_name.or_else(|| self.keys.first()).cloned()
    }
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// Client certificates on a TLS listener (`server.tls.client_auth`).
#[derive(Debug, Clone, Copy)]
pub struct ClientAuth<'a> {
    /// The PEM file of the CA certificates a client certificate must chain
    /// to (`server.tls.client_auth.ca`).
    pub ca: &'a Path,
    /// Whether a client must present a certificate; without one the
    /// handshake fails. Otherwise one is asked for but may be left out.
    pub required: bool,
}

/// The config field of [`ClientAuth::ca`], for errors.
const CLIENT_CA_FIELD: &str = "server.tls.client_auth.ca";

/// The verifier of client certificates: every certificate of the CA file
/// is a trust anchor.
fn client_verifier(
    auth: ClientAuth<'_>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let error = |problem: String| TlsError {
        field: CLIENT_CA_FIELD.into(),
        file: auth.ca.to_owned(),
        problem,
    };
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in read_chain(CLIENT_CA_FIELD, auth.ca)?
        .into_iter()
        .enumerate()
    {
        roots.add(cert).map_err(|e| {
            error(format!(
                "certificate {} is not a usable CA certificate: {e}",
                i + 1
            ))
        })?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = if auth.required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map_err(|e| error(format!("cannot verify client certificates with it: {e}")))
}

/// The server config of the TLS listeners: TLS 1.2 and 1.3, the
/// certificates chosen by SNI, ALPN `h2` then `http/1.1`; with
/// `client_auth`, client certificates asked for and verified (see the
/// module doc), else none asked for.
pub fn server_config(
    certificates: &[CertificateConfig],
    client_auth: Option<ClientAuth<'_>>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let keys = certificates
        .iter()
        .enumerate()
        .map(|(i, c)| certified_key(i, c))
        .collect::<Result<Vec<_>, _>>()?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError {
            field: "server.tls".into(),
            file: PathBuf::new(),
            problem: e.to_string(),
        })?;
    let builder = match client_auth {
        Some(auth) => builder.with_client_cert_verifier(client_verifier(auth)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(BySni { keys }));
    config.alpn_protocols = vec![H2.to_vec(), HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// Whether a TLS session negotiated HTTP/2 by ALPN.
pub fn negotiated_h2(alpn: Option<&[u8]>) -> bool {
    alpn == Some(H2)
}

/// The client config for one upstream's `https://` targets (field paths
/// under `upstreams.<upstream>.tls`): the system's roots plus `ca`, or no
/// verification at all with `verify: false`; a client certificate for
/// mutual TLS; ALPN `h2` when `http2`, else `http/1.1`.
pub fn client_config(
    upstream: &str,
    tls: Option<&UpstreamTls>,
    http2: bool,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let field = |leaf: &str| format!("upstreams.{upstream}.tls.{leaf}");
    let mut roots = rustls::RootCertStore::empty();
    // The system's roots; ones that do not parse are skipped (rustls-native-
    // certs reports them, but a stray file must not stop the gateway).
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(ca) = tls.and_then(|t| t.ca.as_deref()) {
        for cert in read_chain(&field("ca"), ca)? {
            roots.add(cert).map_err(|e| TlsError {
                field: field("ca"),
                file: ca.to_owned(),
                problem: format!("not a usable CA certificate: {e}"),
            })?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError {
            field: field("verify"),
            file: PathBuf::new(),
            problem: e.to_string(),
        })?
        .with_root_certificates(roots);
    let mut config = match tls.and_then(|t| t.client_cert.as_ref()) {
        Some((cert, key)) => {
            let chain = read_chain(&field("cert"), cert)?;
            let private = read_key(&field("key"), key)?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| TlsError {
                    field: field("key"),
                    file: key.clone(),
                    problem: format!("does not go with {}: {e}", cert.display()),
                })?
        }
        None => builder.with_no_client_auth(),
    };
    if tls.is_some_and(|t| !t.verify) {
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(NoVerification(provider())));
    }
    config.alpn_protocols = vec![if http2 { H2.to_vec() } else { HTTP11.to_vec() }];
    Ok(Arc::new(config))
}

/// `verify: false`: any certificate is accepted (signatures are still
/// checked, so the session is with the holder of the key it presents).
struct NoVerification(Arc<CryptoProvider>);

impl fmt::Debug for NoVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NoVerification")
    }
}

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The name a target is verified and addressed (SNI) by: `server_name`, or
/// the target's host (an IP address is checked against IP SANs, and sends
/// no SNI).
pub fn server_name(host: &str, tls: Option<&UpstreamTls>) -> Option<ServerName<'static>> {
    let name = tls
        .and_then(|t| t.server_name.as_deref())
        .unwrap_or(host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(name.to_owned()).ok()
}

/// A test PKI made at run time with rcgen: CAs, the server and client
/// certificates they issue, and TLS connections over a local TCP pair.
#[cfg(test)]
pub(crate) mod test_pki {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use rcgen::string::Ia5String;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, SanType,
    };
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use crate::config::CertificateConfig;

    /// A certificate and its key, for a rustls client config.
    pub(crate) type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

    /// A CA whose certificate is `<dir>/<name>.pem`.
    pub(crate) struct Ca {
        issuer: Issuer<'static, KeyPair>,
        /// The CA certificate's PEM file.
        pub(crate) pem: PathBuf,
        der: CertificateDer<'static>,
    }

    impl Ca {
        pub(crate) fn new(dir: &Path, name: &str) -> Ca {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            let cert = params.self_signed(&key).unwrap();
            let pem = dir.join(format!("{name}.pem"));
            std::fs::write(&pem, cert.pem()).unwrap();
            Ca {
                issuer: Issuer::new(params, key),
                pem,
                der: cert.der().clone(),
            }
        }

        /// The CA as the only root.
        pub(crate) fn roots(&self) -> rustls::RootCertStore {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.der.clone()).unwrap();
            roots
        }

        /// A certificate of `params` signed by the CA, with its key.
        pub(crate) fn issue(&self, params: CertificateParams) -> Identity {
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            let key = PrivatePkcs8KeyDer::from(key.serialize_der()).into();
            (vec![cert.der().clone()], key)
        }

        /// A server certificate for `localhost`, as `<dir>/server.pem` and
        /// `<dir>/server.key`.
        pub(crate) fn server(&self, dir: &Path) -> CertificateConfig {
            let key = KeyPair::generate().unwrap();
            let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            let (c, k) = (dir.join("server.pem"), dir.join("server.key"));
            std::fs::write(&c, cert.pem()).unwrap();
            std::fs::write(&k, key.serialize_pem()).unwrap();
            CertificateConfig { cert: c, key: k }
        }

        /// A client certificate with the DNS name `dns`, the URI `uri` and
        /// the common name `cn`, for client authentication.
        pub(crate) fn client(&self, dns: &str, uri: &str, cn: &str) -> Identity {
            self.issue(client_params(dns, uri, cn))
        }
    }

    /// The parameters of a client certificate (see [`Ca::client`]).
    pub(crate) fn client_params(dns: &str, uri: &str, cn: &str) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![
            SanType::DnsName(Ia5String::try_from(dns).unwrap()),
            SanType::URI(Ia5String::try_from(uri).unwrap()),
        ];
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params
    }

    /// A client trusting `roots`, presenting `identity` if any, offering
    /// the ALPN protocols `alpn`.
    pub(crate) fn client_config(
        roots: rustls::RootCertStore,
        identity: Option<Identity>,
        alpn: &[&[u8]],
    ) -> Arc<rustls::ClientConfig> {
        let builder = rustls::ClientConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match identity {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Connect to `addr` as `localhost` over TLS.
    pub(crate) async fn connect(
        addr: std::net::SocketAddr,
        client: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(client)
            .connect(name, tcp)
            .await
    }

    /// What the server side of a handshake saw.
    #[derive(Debug)]
    pub(crate) struct Accepted {
        /// The client's certificate chain, as rustls verified it.
        pub(crate) peer_certificates: Option<Vec<CertificateDer<'static>>>,
        /// The protocol ALPN chose.
        pub(crate) alpn: Option<Vec<u8>>,
        /// Whether the session was resumed.
        pub(crate) resumed: bool,
    }

    /// One handshake between `server` and `client` over a local TCP pair:
    /// the server's outcome, and whether the client then read the server's
    /// first bytes (in TLS 1.3 the client's handshake ends before the
    /// server has checked its certificate: a refusal shows on that read).
    pub(crate) async fn handshake(
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
    ) -> (std::io::Result<Accepted>, std::io::Result<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = async {
            let (tcp, _) = listener.accept().await?;
            let mut tls = tokio_rustls::TlsAcceptor::from(server).accept(tcp).await?;
            let (_, conn) = tls.get_ref();
            let accepted = Accepted {
                peer_certificates: conn.peer_certificates().map(<[_]>::to_vec),
                alpn: conn.alpn_protocol().map(<[_]>::to_vec),
                resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
            };
            tls.write_all(b"ok").await?;
            tls.flush().await?;
            Ok(accepted)
        };
        let connecting = async {
            let mut tls = connect(addr, client).await?;
            let mut ok = [0u8; 2];
            tls.read_exact(&mut ok).await?;
            assert_eq!(&ok, b"ok");
            Ok(())
        };
        let both = async { tokio::join!(serving, connecting) };
        tokio::time::timeout(Duration::from_secs(10), both)
            .await
            .expect("the handshake ends within 10 s")
    }
}

#[cfg(test)]
mod tests {
    use super::test_pki::{client_config, client_params, handshake, Ca};
    use super::*;
    use crate::auth::mtls::{CertField, PeerCert};

    /// A server CA with a `localhost` certificate, a client CA and another
    /// CA, in a fresh directory.
    struct Setup {
        dir: PathBuf,
        servers: Ca,
        clients: Ca,
        other: Ca,
        certificate: CertificateConfig,
    }

    impl Setup {
        fn new() -> Setup {
            let dir = tollgate_testkit::temp_dir("mtls");
            let servers = Ca::new(&dir, "servers");
            let certificate = servers.server(&dir);
            Setup {
                clients: Ca::new(&dir, "clients"),
                other: Ca::new(&dir, "other"),
                servers,
                certificate,
                dir,
            }
        }

        /// The listener's config, asking for client certificates chained
        /// to the client CA (`required` or not), or asking for none.
        fn server(&self, client_auth: Option<bool>) -> Arc<rustls::ServerConfig> {
            let auth = client_auth.map(|required| ClientAuth {
                ca: &self.clients.pem,
                required,
            });
            server_config(std::slice::from_ref(&self.certificate), auth).unwrap()
        }

        /// A client presenting `identity`, offering h2 and HTTP/1.1.
        fn client(&self, identity: Option<test_pki::Identity>) -> Arc<rustls::ClientConfig> {
            client_config(self.servers.roots(), identity, &[H2, HTTP11])
        }
    }

    impl Drop for Setup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[tokio::test]
    async fn a_required_client_certificate_is_verified_and_its_names_read() {
        let s = Setup::new();
        let good = s
            .clients
            .client("billing.internal", "spiffe://t/billing", "billing");
        let (server, client) = handshake(s.server(Some(true)), s.client(Some(good))).await;
        client.unwrap();
        let accepted = server.unwrap();
        assert_eq!(
            accepted.alpn.as_deref(),
            Some(H2),
            "h2 still chosen by ALPN"
        );
        let chain = accepted
            .peer_certificates
            .expect("the client's certificate");
        let peer = PeerCert::from_der(&chain[0]).unwrap();
        assert_eq!(peer.name(CertField::SanDns), Some("billing.internal"));
        assert_eq!(peer.name(CertField::SanUri), Some("spiffe://t/billing"));
        assert_eq!(peer.name(CertField::SubjectCn), Some("billing"));
    }

    #[tokio::test]
    async fn a_required_client_certificate_left_out_or_unverified_fails_the_handshake() {
        let s = Setup::new();
        let server = s.server(Some(true));
        let mut expired = client_params("old.internal", "urn:old", "old");
        expired.not_before = rcgen::date_time_ymd(2000, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let mut server_only = client_params("srv.internal", "urn:srv", "srv");
        server_only.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cases = [
            ("no certificate", None),
            (
                "another CA's",
                Some(s.other.client("a.internal", "urn:a", "a")),
            ),
            ("expired", Some(s.clients.issue(expired))),
            ("for servers only", Some(s.clients.issue(server_only))),
        ];
        for (case, identity) in cases {
            let (accepted, client) = handshake(server.clone(), s.client(identity)).await;
            let error = accepted.expect_err(case);
            assert!(client.is_err(), "{case}: the client is refused too");
            assert_eq!(
                error.kind(),
                std::io::ErrorKind::InvalidData,
                "{case}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn an_optional_client_certificate_may_be_left_out_but_not_be_wrong() {
        let s = Setup::new();
        let server = s.server(Some(false));
        let (accepted, client) = handshake(server.clone(), s.client(None)).await;
        client.unwrap();
        let accepted = accepted.unwrap();
        assert_eq!(accepted.peer_certificates, None);
        assert_eq!(accepted.alpn.as_deref(), Some(H2));

        let wrong = s.other.client("a.internal", "urn:a", "a");
        let (accepted, client) = handshake(server.clone(), s.client(Some(wrong))).await;
        assert!(
            accepted.is_err() && client.is_err(),
            "a presented certificate must verify"
        );

        let good = s.clients.client("b.internal", "urn:b", "b");
        let chain = good.0.clone();
        let (accepted, client) = handshake(server, s.client(Some(good))).await;
        client.unwrap();
        assert_eq!(accepted.unwrap().peer_certificates, Some(chain));
    }

    #[tokio::test]
    async fn a_resumed_session_keeps_its_client_certificate() {
        let s = Setup::new();
        let server = s.server(Some(true));
        let identity = s.clients.client("c.internal", "urn:c", "c");
        let chain = identity.0.clone();
        let client = s.client(Some(identity));
        let (first, _) = handshake(server.clone(), client.clone()).await;
        let first = first.unwrap();
        assert!(!first.resumed);
        let (again, done) = handshake(server, client.clone()).await;
        done.unwrap();
        let again = again.unwrap();
        assert!(again.resumed, "the second handshake resumes the first");
        assert_eq!(again.peer_certificates, Some(chain));
        // A reload that trusts another CA builds a new config, with a
        // session cache of its own: the session is not resumed past it.
        let auth = ClientAuth {
            ca: &s.other.pem,
            required: true,
        };
        let reloaded = server_config(std::slice::from_ref(&s.certificate), Some(auth)).unwrap();
        let (after, _) = handshake(reloaded, client).await;
        assert!(
            after.is_err(),
            "the certificate is checked against the new CA"
        );
    }

    #[tokio::test]
    async fn without_client_auth_no_certificate_is_asked_for() {
        let s = Setup::new();
        let identity = s.clients.client("b.internal", "urn:b", "b");
        let client = client_config(s.servers.roots(), Some(identity), &[HTTP11]);
        let (accepted, client) = handshake(s.server(None), client).await;
        client.unwrap();
        let accepted = accepted.unwrap();
        assert_eq!(
            accepted.peer_certificates, None,
            "none asked for, none kept"
        );
        assert_eq!(accepted.alpn.as_deref(), Some(HTTP11));
    }

    #[test]
    fn a_client_ca_that_cannot_be_used_is_an_error_naming_the_field_and_file() {
        let s = Setup::new();
        let missing = s.dir.join("missing.pem");
        let key_only = s.certificate.key.clone();
        let garbage = s.dir.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let cases = [
            (&missing, "cannot read it"),
            (&key_only, "no certificate in it"),
            (&garbage, "certificate 1 is not a usable CA certificate"),
        ];
        for (ca, problem) in cases {
            let auth = ClientAuth { ca, required: true };
            let error =
                server_config(std::slice::from_ref(&s.certificate), Some(auth)).expect_err(problem);
            assert_eq!(error.field, "server.tls.client_auth.ca");
            assert_eq!(&error.file, ca);
            assert!(error.problem.starts_with(problem), "{error}");
            let shown = error.to_string();
            assert!(
                shown.starts_with(&format!("server.tls.client_auth.ca: {}: ", ca.display())),
                "{shown}"
            );
        }
    }
}
