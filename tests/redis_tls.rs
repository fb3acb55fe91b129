//! The Redis store over TLS (`rediss://`, `store.tls`) against a real
//! `redis-server --tls-port`, with certificates made here by a test CA
//! (rcgen). The server also keeps a plain port, for the harness only.
//!
//! Decisions over TLS are shared by two gateways; a server certificate from
//! another CA, a name the certificate does not carry, or a missing client
//! certificate (when the server requires one) is refused, with an error
//! that says so in the gateway's log, and `on_error` answers meanwhile;
//! `store.tls.cert`/`key` and `store.tls.server_name` fix the last two.
//! A Redis Cluster whose nodes serve TLS (and talk TLS on the bus) is
//! reached through its TLS ports.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{info, NodeTls, RedisCluster};
use common::limits::*;
use common::pki::Pki;
use common::redis::{free_port, RedisServer};
use common::{Gateway, OneRoute, Resp};

/// A `redis-server` with a TLS port whose certificate names `names`,
/// issued by `pki`; client certificates required when `auth_clients`.
struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
}

impl TlsRedis {
    fn start(pki: &Pki, names: &[&str], auth_clients: bool) -> TlsRedis {
        let (cert, key) = pki.issue(names, "redis");
        let tls_port = free_port();
        let path = |p: &Path| p.display().to_string();
        let server = RedisServer::start_with(&[
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&cert),
            "--tls-key-file".into(),
            path(&key),
            "--tls-ca-cert-file".into(),
            path(&pki.ca()),
            "--tls-auth-clients".into(),
            if auth_clients { "yes" } else { "no" }.into(),
        ]);
        TlsRedis { server, tls_port }
    }

    /// A gateway config on the TLS port (`rediss://<host>:<port>`) with
    /// `tls` as `store.tls`.
    fn config(&self, host: &str, tls: &str) -> String {
        five_an_hour(&format!(
            r#"{{ backend: redis, url: "rediss://{host}:{port}/0", prefix: t, timeout: 2s, on_error: deny, tls: {tls} }}"#,
            port = self.tls_port
        ))
        .config()
    }

    /// How many clients are connected to the TLS port (`CLIENT LIST`'s
    /// `laddr`), asked on the plain port.
    async fn tls_clients(&self) -> usize {
        let list: String = self.server.cmd(&["CLIENT", "LIST"]).await;
        let tls = format!("laddr=127.0.0.1:{} ", self.tls_port);
        list.lines().filter(|l| l.contains(&tls)).count()
    }
}

/// Route `r` on `store` under `l`: five requests an hour.
fn five_an_hour(store: &str) -> OneRoute {
    OneRoute::new().store(store).limit(
        "l",
        "{ algorithm: fixed_window, limit: 5, window: 1h, key: route }",
    )
}

/// `{ ca: <the CA's file> }`, plus `extra` fields.
fn tls_with_ca(pki: &Pki, extra: &str) -> String {
    format!("{{ ca: \"{}\"{extra} }}", pki.ca().display())
}

/// Five GETs of `/`, alternating between two gateways, each answered 200.
async fn five_over_two(a: &Caller, b: &Caller) -> Vec<Resp> {
    let mut out = Vec::new();
    for i in 0..5 {
        let r = if i % 2 == 0 {
            a.get("/").await
        } else {
            b.get("/").await
        };
        assert_ok(&r);
        out.push(r);
    }
    out
}

/// Five requests over two gateways pass, the sixth is rejected: the two
/// share one count, decided on the TLS port.
async fn decided_over_tls(redis: &TlsRedis, a: &Gateway, b: &Gateway) {
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    for (i, r) in five_over_two(&ca, &cb).await.iter().enumerate() {
        assert_eq!(remaining(r, "l"), 4 - i as i64);
    }
    assert_rejected(&cb.get("/").await, "rate_limited", "l");
    assert_rejected(&ca.get("/").await, "rate_limited", "l");
    assert!(
        redis
            .server
            .keys()
            .await
            .iter()
            .any(|k| k.starts_with("t:")),
        "the state is on the server"
    );
    assert!(
        redis.tls_clients().await >= 2,
        "both gateways are connected to the TLS port"
    );
}

/// A gateway whose TLS handshake fails: its request gets the `deny`
/// policy's answer, and its log names the reason (`expect`, a fragment of
/// the error, as rustls words it).
async fn refused(t: &str, expect: &str) {
    let gw = Gateway::start(t).await;
    let r = Caller::new(gw.addr()).get("/").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("limiter_unavailable"), "{}", r.text());
    let t0 = Instant::now();
    loop {
        let logs = gw.output();
        if logs.contains(expect) {
            assert!(
                logs.to_lowercase().contains("certificate"),
                "the error says it is about TLS: {logs}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the log names {expect}: {logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_made_over_tls() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki, &["127.0.0.1"], false);
    let t = redis.config("127.0.0.1", &tls_with_ca(&pki, ""));
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    decided_over_tls(&redis, &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki, &["127.0.0.1"], false);
    let other = Pki::new();
    // Both test CAs have one name: the signature is what does not match.
    refused(
        &redis.config("127.0.0.1", &tls_with_ca(&other, "")),
        "invalid peer certificate: BadSignature",
    )
    .await;
    // Without `store.tls.ca` the system's roots are used: refused too.
    refused(
        &redis.config("127.0.0.1", "{}"),
        "invalid peer certificate: UnknownIssuer",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_when_the_server_requires_one() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki, &["127.0.0.1"], true);
    let (cert, key) = pki.issue(&["tollgate"], "client");
    let with_cert = redis.config(
        "127.0.0.1",
        &tls_with_ca(
            &pki,
            &format!(", cert: \"{}\", key: \"{}\"", cert.display(), key.display()),
        ),
    );
    let (a, b) = (
        Gateway::start(&with_cert).await,
        Gateway::start(&with_cert).await,
    );
    decided_over_tls(&redis, &a, &b).await;
    // Without one, the server ends the handshake.
    refused(
        &redis.config("127.0.0.1", &tls_with_ca(&pki, "")),
        "CertificateRequired",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_name_checks_the_certificate_for_another_name() {
    let pki = Pki::new();
    // The certificate names the service, not the address the URL dials.
    let redis = TlsRedis::start(&pki, &["redis.internal"], false);
    refused(
        &redis.config("127.0.0.1", &tls_with_ca(&pki, "")),
        "certificate not valid for name",
    )
    .await;
    let t = redis.config(
        "127.0.0.1",
        &tls_with_ca(&pki, ", server_name: redis.internal"),
    );
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    decided_over_tls(&redis, &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_reached_over_tls() {
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["127.0.0.1"], "node");
    let cluster = RedisCluster::start_with(Some(&NodeTls {
        cert,
        key,
        ca: pki.ca(),
    }));
    let seeds: Vec<String> = cluster
        .tls_ports
        .iter()
        .map(|p| format!("\"rediss://127.0.0.1:{p}\""))
        .collect();
    // Two limits, on two slots (most likely two masters): redirections
    // and the slot map must name the TLS ports too.
    let t = five_an_hour(&format!(
        "{{ backend: redis_cluster, urls: [{}], prefix: ct, timeout: 2s, on_error: deny, tls: {} }}",
        seeds.join(", "),
        tls_with_ca(&pki, "")
    ))
    .limit(
        "g",
        "{ algorithm: token_bucket, rate: 100/h, burst: 100, key: global }",
    )
    .config();
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    let (ca, cb) = (Caller::new(a.addr()), Caller::new(b.addr()));
    for (i, r) in five_over_two(&ca, &cb).await.iter().enumerate() {
        let i = i as i64;
        assert_eq!((remaining(r, "l"), remaining(r, "g")), (4 - i, 99 - i));
    }
    let r = cb.get("/").await;
    assert_rejected(&r, "rate_limited", "l");
    assert_eq!(
        remaining(&r, "g"),
        95,
        "g refunded: the rejected request took nothing"
    );
    // Every gateway connection is on a TLS port.
    let mut on_tls = 0;
    for (n, p) in cluster.nodes.iter().zip(&cluster.tls_ports) {
        let list = info(n, &["CLIENT", "LIST"]).unwrap_or_default();
        on_tls += list
            .lines()
            .filter(|l| l.contains(&format!("laddr=127.0.0.1:{p} ")))
            .count();
    }
    assert!(on_tls >= 2, "the gateways talk to the nodes' TLS ports");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_their_master_are_reached_over_tls() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki, &["127.0.0.1"], false);
    let (cert, key) = pki.issue(&["127.0.0.1"], "sentinel");
    let tls_port = free_port();
    // The sentinel serves TLS and monitors the master on its TLS port.
    let sentinel = RedisServer::sentinel_with(
        "tlsmaster",
        redis.tls_port,
        1,
        &format!(
            "tls-port {tls_port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients no\ntls-replication yes",
            cert.display(),
            key.display(),
            pki.ca().display()
        ),
    );
    let named = info(
        &sentinel,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "tlsmaster"],
    );
    assert_eq!(
        named.as_deref(),
        Some(format!("127.0.0.1\n{}", redis.tls_port).as_str())
    );
    let t = five_an_hour(&format!(
        r#"{{ backend: redis_sentinel, urls: ["rediss://127.0.0.1:{tls_port}"], master_name: tlsmaster, prefix: t, timeout: 2s, on_error: deny, tls: {} }}"#,
        tls_with_ca(&pki, "")
    ))
    .config();
    let (a, b) = (Gateway::start(&t).await, Gateway::start(&t).await);
    decided_over_tls(&redis, &a, &b).await;
    // (The sentinel was asked on its TLS port: the only one the gateways
    // were given, and a plain client gets no answer there.)
}
