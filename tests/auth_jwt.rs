//! JWT bearer tokens through the real binary
//! (docs/configuration/consumers.md): keys generated here, a JWKS served
//! over real HTTPS ([`JwksServer`], trusted through `SSL_CERT_FILE`), PEM
//! key files and a shared secret; every algorithm family, the forgeries
//! (`alg: none`, an RSA public key as an HMAC secret, tampering), the time
//! claims and their leeway, issuer and audience, tokens that repeat a
//! member, the 16 KiB bound, and the
//! JWKS refetch window (an unknown `kid` flood, key rotation, a JWKS down at
//! start-up, probes that never fetch).

mod common;

use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use common::client::{self, Resp};
use common::gateway::temp_dir;
use common::jwks::JwksServer;
use common::jwt::{self, b64, bearer, Key};
use common::pki::Pki;
use common::{dedent, eventually, Echo, Gateway, OneRoute};

/// The JWKS issuer.
const IDP: &str = "https://idp.example/";
/// The PEM issuer.
const PEM_ISS: &str = "https://pem.example/";
/// The HMAC issuer.
const HS_ISS: &str = "https://hs.example/";
const SECRET: &str = "hs-secret-for-the-jwt-tests-32-bytes-at-least";

/// The keys of one test: RSA (`rsa`), P-256 (`p256`), P-384 (`p384`),
/// Ed25519 (`ed`) in the JWKS; P-256 (`pem-ec`) and RSA in PEM files.
struct Keys {
    p256: Key,
    p384: Key,
    ed: Key,
    pem_ec: Key,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            p256: jwt::p256(),
            p384: jwt::p384(),
            ed: jwt::ed25519(),
            pem_ec: jwt::p256(),
        }
    }

    /// The JWKS document of the `IDP` issuer.
    fn jwks(&self) -> Vec<u8> {
        jwt::jwks(&[
            jwt::rsa().jwk_kid("rsa"),
            self.p256.jwk_kid("p256"),
            self.p384.jwk_kid("p384"),
            self.ed.jwk_kid("ed"),
        ])
    }
}

/// A gateway (route `all` on `/` requiring a JWT, proxying to an echo) with
/// three issuers: `IDP` by JWKS URL, `PEM_ISS` by PEM files (the RSA
/// key's SPKI and the `pem-ec` key's certificate), `HS_ISS` by secret.
struct Setup {
    gw: Gateway,
    echo: Echo,
    jwks: JwksServer,
    keys: Keys,
}

impl Setup {
    async fn start() -> Setup {
        let keys = Keys::new();
        let jwks = JwksServer::start(keys.jwks()).await;
        Setup::with(keys, jwks, "10m", true).await
    }

    async fn with(keys: Keys, jwks: JwksServer, refresh: &str, trust: bool) -> Setup {
        let echo = Echo::start("e").await;
        let dir = temp_dir("jwt-keys");
        let (rsa_pem, ec_pem) = (dir.join("rsa.pem"), dir.join("ec-cert.pem"));
        std::fs::write(&rsa_pem, &jwt::rsa().public_pem).unwrap();
        std::fs::write(&ec_pem, &keys.pem_ec.cert_pem).unwrap();
        let config = OneRoute::proxy(&echo)
            .route_keys("auth: { require: [jwt] }")
            .server("max_header_bytes: 64KiB")
            .config()
            + &dedent(&format!(
                r#"
                consumers:
                  jwt:
                    issuers:
                      - issuer: "{IDP}"
                        audiences: [api, other-api]
                        algorithms: [RS256, PS256, ES256, ES384, EdDSA]
                        jwks: {{ url: "{}", refresh: {refresh} }}
                        leeway: 30s
                      - issuer: "{PEM_ISS}"
                        audiences: [api]
                        algorithms: [RS256, ES256]
                        keys: [{{ pem: "{}" }}, {{ pem: "{}" }}]
                        consumer: org.user
                      - issuer: "{HS_ISS}"
                        secret: "{SECRET}"
                  identity_headers: {{ consumer: x-consumer }}
                "#,
                jwks.url(),
                rsa_pem.display(),
                ec_pem.display()
            ));
        // The JWKS server's CA is trusted as a system root, unless the test
        // says otherwise (another CA's file).
        let ca = match trust {
            true => jwks.ca(),
            false => Pki::new().ca(),
        };
        let ca = ca.display().to_string();
        let gw = Gateway::start_env(&config, &[("SSL_CERT_FILE", &ca)]).await;
        Setup {
            gw,
            echo,
            jwks,
            keys,
        }
    }

    /// `GET /` with `Authorization: Bearer <token>`.
    async fn send(&self, token: &str) -> Resp {
        client::get_with(self.gw.addr(), "/", &[("authorization", &bearer(token))]).await
    }

    /// Asserts `token` is accepted, naming `consumer` upstream.
    async fn accepted(&self, token: &str, consumer: &str, what: &str) {
        let before = self.echo.count();
        let r = self.send(token).await;
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        assert_eq!(self.echo.count(), before + 1, "{what}");
        let seen = self.echo.last().unwrap();
        assert_eq!(
            seen.header("x-consumer").as_deref(),
            Some(consumer),
            "{what}"
        );
    }

    /// Asserts `token` is refused as an invalid bearer token.
    async fn refused(&self, token: &str, what: &str) {
        let before = self.echo.count();
        let r = self.send(token).await;
        assert_eq!(r.status, 401, "{what}: {}", r.text());
        assert_eq!(r.json()["error"], "invalid_credentials", "{what}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"tollgate\", error=\"invalid_token\""),
            "{what}"
        );
        assert_eq!(self.echo.count(), before, "{what} reached the upstream");
    }
}

/// Claims of `IDP` for audience `api` naming `sub`, plus `extra`.
fn claims(iss: &str, sub: &str, extra: Value) -> Value {
    let mut c = jwt::claims(iss, "api", sub);
    if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_family_verifies() {
    let s = Setup::start().await;
    let k = &s.keys;
    let idp = |sub: &str| claims(IDP, sub, json!({}));
    let cases: [(&str, String); 6] = [
        (
            "RS256",
            jwt::rsa().token("RS256", Some("rsa"), &idp("u-rs256")),
        ),
        (
            "PS256",
            jwt::rsa().token("PS256", Some("rsa"), &idp("u-ps256")),
        ),
        (
            "ES256",
            k.p256.token("ES256", Some("p256"), &idp("u-es256")),
        ),
        (
            "ES384",
            k.p384.token("ES384", Some("p384"), &idp("u-es384")),
        ),
        ("EdDSA", k.ed.token("EdDSA", Some("ed"), &idp("u-eddsa"))),
        (
            "HS256",
            jwt::hmac_token(
                SECRET.as_bytes(),
                "HS256",
                &claims(HS_ISS, "u-hs256", json!({})),
            ),
        ),
    ];
    for (alg, token) in &cases {
        s.accepted(token, &format!("u-{}", alg.to_lowercase()), alg)
            .await;
    }
    // Without a kid: the keys that fit the algorithm are tried.
    s.accepted(
        &k.ed.token("EdDSA", None, &idp("no-kid")),
        "no-kid",
        "EdDSA without kid",
    )
    .await;
    // PEM keys (an SPKI and a certificate); the consumer from a nested claim.
    let nested = claims(PEM_ISS, "ignored", json!({"org": {"user": "nested-7"}}));
    s.accepted(
        &jwt::rsa().token("RS256", None, &nested),
        "nested-7",
        "RS256 by PEM",
    )
    .await;
    s.accepted(
        &k.pem_ec.token("ES256", None, &nested),
        "nested-7",
        "ES256 by certificate",
    )
    .await;
    // An array `aud` holding one of the audiences.
    let multi = claims(IDP, "multi", json!({"aud": ["x", "other-api"]}));
    s.accepted(
        &k.p256.token("ES256", Some("p256"), &multi),
        "multi",
        "aud array",
    )
    .await;
    // A key under another kid, or an algorithm the key's type does not fit.
    s.refused(
        &k.p256.token("ES256", Some("p384"), &idp("x")),
        "ES256 under the P-384 kid",
    )
    .await;
    s.refused(
        &jwt::rsa().token("RS384", Some("rsa"), &idp("x")),
        "RS384 (not allowed)",
    )
    .await;
    s.refused(
        &k.p256.token("ES256", None, &claims(HS_ISS, "x", json!({}))),
        "ES256 for the HS issuer",
    )
    .await;
    // A kid this issuer lacks (the refetch is rate limited: still unknown).
    s.refused(
        &k.p256.token("ES256", Some("nope"), &idp("x")),
        "unknown kid",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_tokens_are_refused() {
    let s = Setup::start().await;
    let good = claims(IDP, "alice", json!({}));
    // `alg: none`, with and without a signature.
    for alg in ["none", "None", "NONE"] {
        let header = json!({"alg": alg, "typ": "JWT"});
        let unsigned = jwt::token_with(&header, &good, |_| Vec::new());
        s.refused(&unsigned, &format!("alg {alg}")).await;
        let signed = jwt::token_with(&header, &good, |m| jwt::rsa().sign("RS256", m));
        s.refused(&signed, &format!("alg {alg}, signed")).await;
    }
    // Algorithm confusion: HS256 keyed with the RSA public key's PEM, for
    // the issuers that hold that key (by JWKS and by PEM file).
    let pem = jwt::rsa().public_pem.as_bytes();
    for iss in [IDP, PEM_ISS] {
        let c = claims(iss, "alice", json!({"org": {"user": "alice"}}));
        s.refused(
            &jwt::hmac_token(pem, "HS256", &c),
            &format!("HS256 with the PEM ({iss})"),
        )
        .await;
        let header = json!({"alg": "HS256", "kid": "rsa"});
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, pem);
        let t = jwt::token_with(&header, &c, |m| ring::hmac::sign(&key, m).as_ref().to_vec());
        s.refused(&t, &format!("HS256 with the PEM under kid rsa ({iss})"))
            .await;
    }
    // Tampering: payload, header, signature.
    let token = jwt::rsa().token("RS256", Some("rsa"), &good);
    s.accepted(&token, "alice", "the untouched token").await;
    let parts: Vec<&str> = token.split('.').collect();
    let admin = b64(claims(IDP, "admin", json!({})).to_string());
    s.refused(
        &format!("{}.{admin}.{}", parts[0], parts[2]),
        "tampered payload",
    )
    .await;
    let header = b64(json!({"alg": "RS256", "kid": "rsa", "typ": "at+jwt"}).to_string());
    s.refused(
        &format!("{header}.{}.{}", parts[1], parts[2]),
        "tampered header",
    )
    .await;
    let mut sig = parts[2].to_string().into_bytes();
    sig[10] = if sig[10] == b'A' { b'B' } else { b'A' };
    let sig = String::from_utf8(sig).unwrap();
    s.refused(
        &format!("{}.{}.{sig}", parts[0], parts[1]),
        "tampered signature",
    )
    .await;
    s.refused(&format!("{}.{}", parts[0], parts[1]), "no signature")
        .await;
    s.refused("not-a-token", "garbage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_token_that_repeats_a_member_is_refused() {
    let s = Setup::start().await;
    let signed = |header: &str, claims: &str| {
        jwt::token_of_text(header, claims, |m| jwt::rsa().sign("RS256", m))
    };
    let header = r#"{"alg":"RS256","kid":"rsa","typ":"JWT"}"#;
    let good = claims(IDP, "alice", json!({})).to_string();
    let with = |extra: &str| format!("{}{extra}}}", &good[..good.len() - 1]);
    s.accepted(&signed(header, &good), "alice", "the token as issued")
        .await;
    s.accepted(
        &signed(header, &with(r#","org":{"sub":"x"}"#)),
        "alice",
        "a name again in a nested object",
    )
    .await;
    let claims_cases = [
        (r#","sub":"bob""#, "a repeated sub"),
        (r#","sub":"alice""#, "a repeated sub, the same value"),
        (r#","\u0073ub":"bob""#, "a repeated sub, escaped"),
        (r#","iss":"https://evil.example/""#, "a repeated iss"),
        (r#","org":{"id":"a","id":"b"}"#, "a repeated nested claim"),
    ];
    for (extra, what) in claims_cases {
        s.refused(&signed(header, &with(extra)), what).await;
    }
    let header_cases = [
        (
            r#"{"alg":"RS256","kid":"rsa","alg":"RS256"}"#,
            "a repeated alg",
        ),
        (
            r#"{"alg":"none","kid":"rsa","alg":"RS256"}"#,
            "alg none, then RS256",
        ),
        (
            r#"{"alg":"RS256","kid":"rsa","kid":"p256"}"#,
            "a repeated kid",
        ),
    ];
    for (header, what) in header_cases {
        s.refused(&signed(header, &good), what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_claims_issuer_and_audience() {
    let s = Setup::start().await;
    let now = jwt::now();
    let sign = |sub: &str, extra: Value| {
        s.keys
            .p256
            .token("ES256", Some("p256"), &claims(IDP, sub, extra))
    };
    // Leeway 30 s, both ways.
    for (what, extra) in [
        ("exp 10 s ago", json!({"exp": now - 10})),
        ("nbf in 10 s", json!({"nbf": now + 10})),
        ("iat in 10 s", json!({"iat": now + 10})),
    ] {
        s.accepted(&sign("in-leeway", extra), "in-leeway", what)
            .await;
    }
    for (what, extra) in [
        ("exp 60 s ago", json!({"exp": now - 60})),
        ("nbf in 60 s", json!({"nbf": now + 60})),
        ("iat in 60 s", json!({"iat": now + 60})),
        ("exp as text", json!({"exp": (now + 600).to_string()})),
        ("nbf as text", json!({"nbf": "yesterday"})),
        ("iat as text", json!({"iat": "now"})),
        ("wrong issuer", json!({"iss": "https://idp.example"})),
        ("unknown issuer", json!({"iss": "https://evil.example/"})),
        ("wrong audience", json!({"aud": "elsewhere"})),
        ("audience array without ours", json!({"aud": ["a", "b"]})),
        ("no audience", json!({"aud": null})),
    ] {
        s.refused(&sign("x", extra), what).await;
    }
    let mut no_exp = claims(IDP, "x", json!({}));
    no_exp.as_object_mut().unwrap().remove("exp");
    s.refused(&s.keys.p256.token("ES256", Some("p256"), &no_exp), "no exp")
        .await;
}

/// An HS256 token of exactly `len` bytes (padded by a claim, and by the
/// header when the base64 length cannot land on it).
fn sized_token(len: usize) -> String {
    for extra in 0..3 {
        let header = json!({"alg": "HS256", "x": "y".repeat(extra)});
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        for pad in (len * 3 / 4).saturating_sub(400)..len {
            let c = claims(HS_ISS, "big", json!({"pad": "p".repeat(pad)}));
            let t = jwt::token_with(&header, &c, |m| ring::hmac::sign(&key, m).as_ref().to_vec());
            if t.len() == len {
                return t;
            }
            if t.len() > len {
                break;
            }
        }
    }
    panic!("no token of {len} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_over_16_kib_is_refused() {
    let s = Setup::start().await;
    s.accepted(&sized_token(16 * 1024), "big", "a 16 KiB token")
        .await;
    s.refused(&sized_token(16 * 1024 + 1), "a 16 KiB + 1 token")
        .await;
}

/// Waits until `s` accepts a token of kid `rsa` (its JWKS fetched), then
/// returns when the refetch window of 30 s since the last fetch has passed
/// (with a margin): the fetch count then, and the token it sent.
async fn after_the_refetch_window(s: &Setup) -> (usize, String) {
    let token = jwt::rsa().token("RS256", Some("rsa"), &claims(IDP, "first", json!({})));
    s.accepted(&token, "first", "the first token").await;
    let (at, fetches) = (Instant::now(), s.jwks.fetches());
    assert!(fetches >= 1);
    tokio::time::sleep_until((at + Duration::from_millis(30_500)).into()).await;
    assert_eq!(
        s.jwks.fetches(),
        fetches,
        "a fetch before any refetch was due"
    );
    (fetches, token)
}

/// An unknown `kid` flood fetches the JWKS at most once, and a rotated key
/// is accepted once that fetch brought it.
async fn unknown_kids_and_rotation() {
    let s = Setup::start().await;
    let rotated =
        jwt::rsa_other().token("RS256", Some("rsa-2"), &claims(IDP, "rotated", json!({})));
    // Serve the new key in place of the old one; within 30 s of the
    // start-up fetch the gateway does not refetch for it.
    let mut keys: Vec<Value> = serde_json::from_slice::<Value>(&s.keys.jwks()).unwrap()["keys"]
        .as_array()
        .unwrap()
        .clone();
    keys.retain(|k| k["kid"] != "rsa");
    keys.push(jwt::rsa_other().jwk_kid("rsa-2"));
    let fetches_at_start = {
        let t = jwt::rsa().token("RS256", Some("rsa"), &claims(IDP, "first", json!({})));
        s.accepted(&t, "first", "the first token").await;
        s.jwks.fetches()
    };
    s.jwks.set(jwt::jwks(&keys));
    s.refused(&rotated, "the rotated key within 30 s of the last fetch")
        .await;
    assert_eq!(
        s.jwks.fetches(),
        fetches_at_start,
        "refetched inside the window"
    );

    let (before, first) = after_the_refetch_window(&s).await;
    let started = Instant::now();
    let s = &s;
    let statuses: Vec<u16> = stream::iter(0..1000)
        .map(|i| {
            let t = s.keys.ed.token(
                "EdDSA",
                Some(&format!("kid-{i}")),
                &claims(IDP, "x", json!({})),
            );
            async move { s.send(&t).await.status.as_u16() }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(statuses.iter().all(|&st| st == 401), "{statuses:?}");
    assert_eq!(
        s.jwks.fetches(),
        before + 1,
        "1,000 unknown kids: one fetch"
    );
    // That fetch brought the rotated key: accepted with no further fetch.
    s.accepted(&rotated, "rotated", "the rotated key after the refetch")
        .await;
    // The old key is gone: a token it signed (verified and cached before)
    // is refused now.
    s.refused(&first, "a token of the removed key").await;
    assert_eq!(s.jwks.fetches(), before + 1);
}

/// A JWKS unreachable at start-up: 503 `auth_unavailable` (not fatal), then
/// tokens verify once it is up and the retry has fetched it.
async fn jwks_down_at_start_up() {
    let keys = Keys::new();
    let server = JwksServer::down(keys.jwks());
    let s = Setup::with(keys, server, "30s", true).await;
    let token = s
        .keys
        .p384
        .token("ES384", Some("p384"), &claims(IDP, "late", json!({})));
    for _ in 0..3 {
        let r = s.send(&token).await;
        r.assert_error(503, "auth_unavailable");
    }
    let unavailable = r#"tollgate_auth_total{route="all",outcome="unavailable"}"#;
    assert_eq!(s.gw.metric(unavailable).await, Some(3.0));
    // gRPC: UNAVAILABLE (14).
    let addr = s.gw.addr();
    let grpc = http::Request::post(format!("http://{addr}/svc.Greeter/Hello"))
        .header("content-type", "application/grpc")
        .header("authorization", bearer(&token))
        .body(client::full(vec![0u8; 5]))
        .unwrap();
    let r = client::send_on_new_conn(addr, client::Proto::H2c, grpc)
        .await
        .unwrap();
    assert_eq!(
        (r.status.as_u16(), r.header("grpc-status")),
        (200, Some("14"))
    );
    // Tokens of the other issuers do not wait for it.
    let hs = jwt::hmac_token(SECRET.as_bytes(), "HS256", &claims(HS_ISS, "hs", json!({})));
    s.accepted(&hs, "hs", "an HS256 token while the JWKS is down")
        .await;
    s.jwks.up();
    let started = Instant::now();
    eventually(
        Duration::from_secs(45),
        "the JWKS fetched after it came up",
        || async {
            let r = s.send(&token).await;
            match r.status.as_u16() {
                200 => Some(()),
                503 => None,
                other => panic!("{other}: {}", r.text()),
            }
        },
    )
    .await;
    eprintln!("JWKS usable {:?} after it came up", started.elapsed());
    assert_eq!(
        s.echo.last().unwrap().header("x-consumer").as_deref(),
        Some("late")
    );
    assert!(s.jwks.fetches() >= 1);
}

/// A probe (`POST /probe`) verifies a token with the keys the gateway
/// holds and never fetches the JWKS, even when a request would: to it a
/// token of an unknown `kid` is `auth_unavailable`, nothing is fetched nor
/// marked as fetched, and the same token sent for real then fetches.
async fn probes_fetch_no_jwks() {
    let s = Setup::start().await;
    let (before, first) = after_the_refetch_window(&s).await;
    let probe_of = |token: &str| json!({"headers": {"authorization": bearer(token)}}).to_string();
    let a = common::limits::probe(&s.gw, &probe_of(&first)).await;
    assert_eq!(
        (&a["status"], &a["upstream"]),
        (&Value::Null, &json!("e")),
        "{a}"
    );
    assert_eq!(a["consumer"]["name"], "first", "{a}");
    let unknown = s
        .keys
        .ed
        .token("EdDSA", Some("kid-new"), &claims(IDP, "x", json!({})));
    for _ in 0..20 {
        let a = common::limits::probe(&s.gw, &probe_of(&unknown)).await;
        let answered = (&a["status"], &a["error"]);
        assert_eq!(answered, (&json!(503), &json!("auth_unavailable")), "{a}");
    }
    assert_eq!(s.jwks.fetches(), before, "a probe fetched the JWKS");
    s.refused(&unknown, "an unknown kid, sent for real").await;
    assert_eq!(s.jwks.fetches(), before + 1, "the request fetched it");
}

/// The scenarios that wait out the 30 s refetch window, side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_refetch_window() {
    tokio::join!(
        unknown_kids_and_rotation(),
        jwks_down_at_start_up(),
        probes_fetch_no_jwks()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_keys_survive_a_reload_with_the_same_url() {
    let s = Setup::start().await;
    let token = s
        .keys
        .p256
        .token("ES256", Some("p256"), &claims(IDP, "kept", json!({})));
    s.accepted(&token, "kept", "before the reload").await;
    let fetches = s.jwks.fetches();
    // The JWKS server goes away; a reload keeps the fetched set (same URL)
    // and fetches nothing.
    s.jwks.set(b"{\"keys\": []}".to_vec());
    let r = s.gw.admin_post("/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    s.accepted(&token, "kept", "after the reload").await;
    let other = s
        .keys
        .ed
        .token("EdDSA", Some("ed"), &claims(IDP, "ed", json!({})));
    s.accepted(&other, "ed", "another key of the kept set")
        .await;
    assert_eq!(s.jwks.fetches(), fetches, "a reload refetched the JWKS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_token_is_never_accepted_past_its_exp() {
    let echo = Echo::start("e").await;
    let config = OneRoute::proxy(&echo)
        .route_keys("auth: { require: [jwt] }")
        .config()
        + &dedent(&format!(
            r#"
            consumers:
              jwt:
                issuers:
                  - {{ issuer: "{HS_ISS}", secret: "{SECRET}", leeway: 0s }}
            "#
        ));
    let gw = Gateway::start(&config).await;
    let exp = jwt::now() + 2;
    let c = json!({"iss": HS_ISS, "sub": "brief", "exp": exp});
    let token = bearer(&jwt::hmac_token(SECRET.as_bytes(), "HS256", &c));
    for _ in 0..3 {
        let r = client::get_with(gw.addr(), "/", &[("authorization", &token)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    while jwt::now() <= exp {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = client::get_with(gw.addr(), "/", &[("authorization", &token)]).await;
    r.assert_error(401, "invalid_credentials");
    assert_eq!(echo.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_server_with_an_untrusted_certificate_is_never_used() {
    let keys = Keys::new();
    let jwks = JwksServer::start(keys.jwks()).await;
    let s = Setup::with(keys, jwks, "10m", false).await;
    let token = s
        .keys
        .p256
        .token("ES256", Some("p256"), &claims(IDP, "x", json!({})));
    for _ in 0..3 {
        s.send(&token).await.assert_error(503, "auth_unavailable");
    }
    assert_eq!(
        s.jwks.fetches(),
        0,
        "a JWKS was read over an unverified connection"
    );
    // The warning comes when the fetch has failed, which the answers need
    // not wait for.
    let t0 = std::time::Instant::now();
    while !s
        .gw
        .stdout_lines()
        .iter()
        .any(|l| l.contains("JWKS fetch failed"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no warning about the failed fetch:\n{}",
            s.gw.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
