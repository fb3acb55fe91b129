//! A real HTTPS JWKS server for the JWT tests: hyper behind tokio-rustls
//! with a certificate from the test PKI ([`Pki`]), serving one JWKS
//! document the test can swap, counting the fetches. It can start down (its
//! port reserved but refusing connections) and come up later.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpSocket};
use tokio_rustls::TlsAcceptor;

use super::pki::Pki;

/// A JWKS served over HTTPS at `https://127.0.0.1:<port>/jwks.json`; stops
/// on drop.
pub struct JwksServer {
    addr: SocketAddr,
    state: Arc<State>,
    acceptor: TlsAcceptor,
    /// The bound socket while the server is down.
    down: Mutex<Option<TcpSocket>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The PKI whose CA signed the server's certificate (the gateway trusts
    /// it through `SSL_CERT_FILE`).
    pki: Pki,
}

#[derive(Default)]
struct State {
    doc: Mutex<Vec<u8>>,
    fetches: AtomicUsize,
}

impl JwksServer {
    /// A server for `doc`, up at once.
    pub async fn start(doc: Vec<u8>) -> JwksServer {
        let server = JwksServer::down(doc);
        server.up();
        server
    }

    /// A server for `doc` whose port is reserved but refuses connections
    /// until [`JwksServer::up`].
    pub fn down(doc: Vec<u8>) -> JwksServer {
        let pki = Pki::new();
        let (cert, key) = pki.issue(&["127.0.0.1"], "jwks");
        let acceptor = acceptor(&cert, &key);
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = socket.local_addr().unwrap();
        let state = Arc::new(State::default());
        *state.doc.lock().unwrap() = doc;
        JwksServer {
            addr,
            state,
            acceptor,
            down: Mutex::new(Some(socket)),
            task: Mutex::new(None),
            pki,
        }
    }

    /// Starts listening (if down).
    pub fn up(&self) {
        let Some(socket) = self.down.lock().unwrap().take() else {
            return;
        };
        let listener = socket.listen(1024).unwrap();
        let task = tokio::spawn(serve(listener, self.acceptor.clone(), self.state.clone()));
        *self.task.lock().unwrap() = Some(task);
    }

    /// Serves `doc` from now on.
    pub fn set(&self, doc: Vec<u8>) {
        *self.state.doc.lock().unwrap() = doc;
    }

    /// How many requests it has answered.
    pub fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("https://{}/jwks.json", self.addr)
    }

    /// The CA file the gateway must trust (as `SSL_CERT_FILE`).
    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
    }
}

fn acceptor(cert: &std::path::Path, key: &std::path::Path) -> TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

/// The accept loop: every connection a TLS handshake, then HTTP/1.1.
async fn serve(listener: TcpListener, acceptor: TlsAcceptor, state: Arc<State>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        while conns.try_join_next().is_some() {}
        let (acceptor, state) = (acceptor.clone(), state.clone());
        conns.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = service_fn(move |req| answer(state.clone(), req));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        });
    }
}

async fn answer(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    state.fetches.fetch_add(1, Ordering::SeqCst);
    if req.uri().path() != "/jwks.json" {
        return Ok(Response::builder()
            .status(404)
            .body(Full::new(Bytes::new()))
            .unwrap());
    }
    let doc = state.doc.lock().unwrap().clone();
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(doc)))
        .unwrap())
}
