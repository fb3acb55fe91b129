//! Verification end to end: keys generated at run time, tokens signed with
//! ring, checked through the public functions.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};

use super::testkit::{self, TestKey};
use super::*;

const ISS: &str = "https://issuer.example/";
const NOW: u64 = 1_700_000_000;
const SECRET: &[u8] = b"a shared secret of at least 32 bytes, for HMAC";

fn validation(algorithms: &[Algorithm]) -> Validation {
    Validation {
        issuer: ISS.into(),
        audiences: vec!["api".into()],
        algorithms: algorithms.to_vec(),
        leeway: Duration::from_secs(30),
    }
}

fn claims() -> Value {
    json!({"iss": ISS, "aud": "api", "sub": "alice", "exp": NOW + 600, "iat": NOW})
}

fn jwks_of(keys: &[Value]) -> KeySet {
    KeySet::from_jwks(&testkit::jwks(keys)).unwrap()
}

/// The token with its `index`th part (0 header, 1 payload, 2 signature)
/// replaced.
fn with_part(token: &str, index: usize, part: &str) -> String {
    let mut parts: Vec<&str> = token.split('.').collect();
    parts[index] = part;
    parts.join(".")
}

#[test]
fn every_algorithm_family_verifies() {
    use Algorithm::*;
    let rsa = testkit::rsa();
    let (p256, p384, ed) = (testkit::p256(), testkit::p384(), testkit::ed25519());
    let set = jwks_of(&[
        rsa.jwk_with("rsa", None),
        p256.jwk_with("p256", None),
        p384.jwk_with("p384", Some(ES384)),
        ed.jwk_with("ed", None),
    ]);
    let cases: [(&TestKey, Algorithm, &str); 9] = [
        (rsa, RS256, "rsa"),
        (rsa, RS384, "rsa"),
        (rsa, RS512, "rsa"),
        (rsa, PS256, "rsa"),
        (rsa, PS384, "rsa"),
        (rsa, PS512, "rsa"),
        (&p256, ES256, "p256"),
        (&p384, ES384, "p384"),
        (&ed, EdDSA, "ed"),
    ];
    for (key, alg, kid) in cases {
        let token = testkit::token(key, alg, Some(kid), &claims());
        let verified = verify(&token, &set, &validation(&[alg]), NOW).unwrap();
        assert_eq!(verified.exp, NOW + 600, "{alg}");
        assert_eq!(verified.claims["sub"], "alice", "{alg}");
        // Without a kid, every key that fits the algorithm is tried.
        let token = testkit::token(key, alg, None, &claims());
        assert!(
            verify(&token, &set, &validation(&[alg]), NOW).is_ok(),
            "{alg}"
        );
    }
    let secret = KeySet::from_secret(SECRET);
    for alg in [HS256, HS384, HS512] {
        let token = testkit::hmac_token(SECRET, alg, &claims());
        assert!(
            verify(&token, &secret, &validation(&[alg]), NOW).is_ok(),
            "{alg}"
        );
        let wrong = testkit::hmac_token(b"another secret of 32 bytes or more!", alg, &claims());
        assert_eq!(
            verify(&wrong, &secret, &validation(&[alg]), NOW),
            Err(JwtError::Signature)
        );
    }
}

#[test]
fn pem_public_keys_and_certificates() {
    use Algorithm::*;
    let rsa = testkit::rsa();
    let (p256, p384, ed) = (testkit::p256(), testkit::p384(), testkit::ed25519());
    let keys: [(&TestKey, Algorithm, KeyKind); 4] = [
        (rsa, RS256, KeyKind::Rsa),
        (&p256, ES256, KeyKind::P256),
        (&p384, ES384, KeyKind::P384),
        (&ed, EdDSA, KeyKind::Ed25519),
    ];
    let mut bundle = String::new();
    for (key, alg, kind) in keys {
        let token = testkit::token(key, alg, None, &claims());
        for pem in [&key.public_pem, &key.cert_pem] {
            let set = KeySet::from_pem(pem.as_bytes()).unwrap();
            assert_eq!(set.keys().len(), 1);
            assert_eq!(set.keys()[0].kind(), kind);
            assert!(
                verify(&token, &set, &validation(&[alg]), NOW).is_ok(),
                "{alg}"
            );
            bundle.push_str(pem);
        }
    }
    // One file, eight blocks: each token finds its key among them.
    let set = KeySet::from_pem(bundle.as_bytes()).unwrap();
    assert_eq!(set.keys().len(), 8);
    for (key, alg, _) in keys {
        let token = testkit::token(key, alg, Some("any"), &claims());
        assert!(
            verify(&token, &set, &validation(&[alg]), NOW).is_ok(),
            "{alg}"
        );
    }
}

#[test]
fn pem_without_a_public_key_is_refused() {
    assert!(KeySet::from_pem(b"").is_err());
    assert!(KeySet::from_pem(b"just text\n").is_err());
    let private =
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
    let err = KeySet::from_pem(private.as_bytes()).unwrap_err();
    assert!(err.contains("private key"), "{err}");
    let garbage = "-----BEGIN PUBLIC KEY-----\nMAMCAQA=\n-----END PUBLIC KEY-----\n";
    assert!(KeySet::from_pem(garbage.as_bytes()).is_err());
}

#[test]
fn alg_none_never_verifies() {
    let set = KeySet::from_secret(SECRET);
    for none in ["none", "None", "NONE"] {
        let header = json!({"alg": none, "typ": "JWT"});
        for sig in [&b""[..], b"x"] {
            let token = testkit::token_with(&header, &claims(), |_| sig.to_vec());
            assert_eq!(
                verify(&token, &set, &validation(&[Algorithm::HS256]), NOW),
                Err(JwtError::Algorithm("\"none\" is never allowed"))
            );
        }
    }
}

#[test]
fn an_rsa_public_key_is_never_an_hmac_secret() {
    let rsa = testkit::rsa();
    // The classic confusion: HS256 keyed with the issuer's public key PEM.
    let forged = testkit::hmac_token(rsa.public_pem.as_bytes(), Algorithm::HS256, &claims());
    let both = validation(&[Algorithm::RS256, Algorithm::HS256]);
    for set in [
        KeySet::from_pem(rsa.public_pem.as_bytes()).unwrap(),
        jwks_of(std::slice::from_ref(&rsa.jwk)),
    ] {
        assert!(matches!(
            verify(&forged, &set, &both, NOW),
            Err(JwtError::Algorithm(_))
        ));
    }
    // And the other kinds' algorithms do not reach an RSA key either.
    let p256 = testkit::p256();
    let es = testkit::token(&p256, Algorithm::ES256, None, &claims());
    let set = KeySet::from_pem(rsa.public_pem.as_bytes()).unwrap();
    assert!(matches!(
        verify(&es, &set, &validation(&[Algorithm::ES256]), NOW),
        Err(JwtError::Algorithm(_))
    ));
}

#[test]
fn algorithms_outside_the_issuers_list_or_its_jwk_alg_are_refused() {
    let rsa = testkit::rsa();
    let token = testkit::token(rsa, Algorithm::PS256, Some("k"), &claims());
    let set = jwks_of(&[rsa.jwk_with("k", None)]);
    assert_eq!(
        verify(&token, &set, &validation(&[Algorithm::RS256]), NOW),
        Err(JwtError::Algorithm("not allowed for the issuer"))
    );
    // The JWK says RS256: a PS256 token may not use it.
    let pinned = jwks_of(&[rsa.jwk_with("k", Some(Algorithm::RS256))]);
    let both = validation(&[Algorithm::RS256, Algorithm::PS256]);
    assert!(matches!(
        verify(&token, &pinned, &both, NOW),
        Err(JwtError::Algorithm(_))
    ));
    let rs = testkit::token(rsa, Algorithm::RS256, Some("k"), &claims());
    assert!(verify(&rs, &pinned, &both, NOW).is_ok());
}

#[test]
fn tampering_breaks_the_signature() {
    let rsa = testkit::rsa();
    let p256 = testkit::p256();
    let sets = [
        (rsa, Algorithm::RS256, jwks_of(&[rsa.jwk_with("k", None)])),
        (
            &p256,
            Algorithm::ES256,
            jwks_of(&[p256.jwk_with("k", None)]),
        ),
    ];
    for (key, alg, set) in &sets {
        let v = validation(&[*alg]);
        let token = testkit::token(key, *alg, Some("k"), &claims());
        assert!(verify(&token, set, &v, NOW).is_ok());
        let mut admin = claims();
        admin["sub"] = json!("admin");
        let payload = URL_SAFE_NO_PAD.encode(admin.to_string());
        let header = json!({"alg": alg.name(), "kid": "k", "typ": "at+jwt"});
        let header = URL_SAFE_NO_PAD.encode(header.to_string());
        let sig = token.rsplit('.').next().unwrap();
        let mut flipped = URL_SAFE_NO_PAD.decode(sig).unwrap();
        flipped[10] ^= 1;
        let flipped = URL_SAFE_NO_PAD.encode(flipped);
        for bad in [
            with_part(&token, 1, &payload),
            with_part(&token, 0, &header),
            with_part(&token, 2, &flipped),
            with_part(&token, 2, ""),
        ] {
            assert_eq!(
                verify(&bad, set, &v, NOW),
                Err(JwtError::Signature),
                "{alg}"
            );
        }
    }
    // Signed by another key of the same kind.
    let other = testkit::token(testkit::rsa_other(), Algorithm::RS256, Some("k"), &claims());
    assert_eq!(
        verify(&other, &sets[0].2, &validation(&[Algorithm::RS256]), NOW),
        Err(JwtError::Signature)
    );
}

#[test]
fn claims_are_checked_after_the_signature() {
    let set = KeySet::from_secret(SECRET);
    let v = validation(&[Algorithm::HS256]);
    let check = |edit: &dyn Fn(&mut Value), now: u64| {
        let mut c = claims();
        edit(&mut c);
        verify(
            &testkit::hmac_token(SECRET, Algorithm::HS256, &c),
            &set,
            &v,
            now,
        )
        .map(|verified| verified.exp)
    };
    let exp = NOW + 600;
    assert_eq!(check(&|_| {}, NOW + 629), Ok(exp));
    assert_eq!(check(&|_| {}, NOW + 630), Err(JwtError::Expired));
    assert_eq!(check(&|c| c["nbf"] = json!(NOW + 30), NOW), Ok(exp));
    assert_eq!(
        check(&|c| c["nbf"] = json!(NOW + 31), NOW),
        Err(JwtError::NotYetValid)
    );
    assert_eq!(
        check(&|c| c["iat"] = json!(NOW + 31), NOW),
        Err(JwtError::IssuedInFuture)
    );
    assert_eq!(
        check(&|c| c["iss"] = json!("https://evil/"), NOW),
        Err(JwtError::Issuer)
    );
    assert_eq!(
        check(&|c| c["aud"] = json!("web"), NOW),
        Err(JwtError::Audience)
    );
    assert_eq!(check(&|c| c["aud"] = json!(["web", "api"]), NOW), Ok(exp));
    assert_eq!(
        check(&|c| drop(c.as_object_mut().unwrap().remove("exp")), NOW),
        Err(JwtError::MissingExp)
    );
    // A forged token with bad claims reports its signature, not its claims.
    let mut expired = claims();
    expired["exp"] = json!(1);
    let forged = testkit::hmac_token(
        b"not the secret, but 32 bytes long",
        Algorithm::HS256,
        &expired,
    );
    assert_eq!(verify(&forged, &set, &v, NOW), Err(JwtError::Signature));
}

#[test]
fn kids_pick_keys() {
    let (a, b) = (testkit::p256(), testkit::p256());
    let set = jwks_of(&[a.jwk_with("a", None), b.jwk_with("b", None)]);
    let v = validation(&[Algorithm::ES256]);
    let token = testkit::token(&b, Algorithm::ES256, Some("b"), &claims());
    assert!(verify(&token, &set, &v, NOW).is_ok());
    // b's token under a's kid: only a is tried.
    let token = testkit::token(&b, Algorithm::ES256, Some("a"), &claims());
    assert_eq!(verify(&token, &set, &v, NOW), Err(JwtError::Signature));
    let token = testkit::token(&b, Algorithm::ES256, Some("c"), &claims());
    assert_eq!(verify(&token, &set, &v, NOW), Err(JwtError::UnknownKid));
    let token = testkit::token(&b, Algorithm::ES256, None, &claims());
    assert!(verify(&token, &set, &v, NOW).is_ok());
    // A kid-less key (PEM, secret) stands for any kid.
    let pem = KeySet::from_pem(b.public_pem.as_bytes()).unwrap();
    let token = testkit::token(&b, Algorithm::ES256, Some("c"), &claims());
    assert!(verify(&token, &pem, &v, NOW).is_ok());
}

#[test]
fn oversized_tokens_are_refused_unparsed() {
    let set = KeySet::from_secret(SECRET);
    let v = validation(&[Algorithm::HS256]);
    // A valid token padded (inside its signed payload) to exactly the limit
    // verifies; one byte more and it is refused before anything is decoded.
    let padded = |len: usize| {
        let mut c = claims();
        c["pad"] = json!("");
        let base = testkit::hmac_token(SECRET, Algorithm::HS256, &c).len();
        // base64 grows 4 for every 3 payload bytes.
        let mut pad = (len - base) * 3 / 4;
        loop {
            c["pad"] = json!("x".repeat(pad));
            let token = testkit::hmac_token(SECRET, Algorithm::HS256, &c);
            match token.len().cmp(&len) {
                std::cmp::Ordering::Equal => return token,
                std::cmp::Ordering::Less => pad += 1,
                std::cmp::Ordering::Greater => pad -= 1,
            }
        }
    };
    let at = padded(MAX_TOKEN_LEN);
    assert!(verify(&at, &set, &v, NOW).is_ok());
    let over = padded(MAX_TOKEN_LEN + 1);
    assert_eq!(over.len(), 16_385);
    assert_eq!(verify(&over, &set, &v, NOW), Err(JwtError::TooLarge));
    assert_eq!(peek_issuer(&over), Err(JwtError::TooLarge));
    let junk = "\u{1}".repeat(MAX_TOKEN_LEN + 1);
    assert_eq!(verify(&junk, &set, &v, NOW), Err(JwtError::TooLarge));
}

#[test]
fn jwks_documents() {
    let rsa = testkit::rsa();
    let (p256, p384, ed) = (testkit::p256(), testkit::p384(), testkit::ed25519());
    let mut enc = rsa.jwk_with("enc", None);
    enc["use"] = json!("enc");
    let mut wrap = p256.jwk_with("wrap", None);
    wrap["key_ops"] = json!(["wrapKey"]);
    let mut sig = p256.jwk_with("sig", None);
    sig["use"] = json!("sig");
    sig["key_ops"] = json!(["verify"]);
    let skipped = [
        enc,
        wrap,
        json!({"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA", "kid": "p521"}),
        json!({"kty": "OKP", "crv": "X25519", "x": "AA"}),
        json!({"kty": "PQC", "kid": "future"}),
        rsa.jwk_with("oaep", None)
            .as_object()
            .cloned()
            .map(|mut k| {
                k.insert("alg".into(), json!("RSA-OAEP"));
                Value::Object(k)
            })
            .unwrap(),
        rsa.jwk_with("mismatch", Some(Algorithm::ES256)),
        json!({"kty": "RSA", "n": "!!", "e": "AQAB"}),
        json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"}),
        json!({"kty": "RSA", "kid": 7, "n": rsa.jwk["n"], "e": "AQAB"}),
    ];
    let mut keys = vec![
        rsa.jwk_with("rsa", Some(Algorithm::RS256)),
        sig,
        p384.jwk_with("p384", None),
        ed.jwk_with("ed", None),
    ];
    keys.extend(skipped.iter().cloned());
    let set = jwks_of(&keys);
    let got: Vec<(KeyKind, Option<&str>, Option<Algorithm>)> = set
        .keys()
        .iter()
        .map(|k| (k.kind(), k.kid(), k.alg()))
        .collect();
    assert_eq!(
        got,
        [
            (KeyKind::Rsa, Some("rsa"), Some(Algorithm::RS256)),
            (KeyKind::P256, Some("sig"), None),
            (KeyKind::P384, Some("p384"), None),
            (KeyKind::Ed25519, Some("ed"), None),
        ]
    );
    assert_eq!(set.skipped().len(), skipped.len(), "{:?}", set.skipped());
    // Padded base64url in a key member is accepted.
    let mut padded = p384.jwk_with("padded", None);
    let x = padded["x"].as_str().unwrap().to_string();
    padded["x"] = json!(format!("{x}{}", "=".repeat((4 - x.len() % 4) % 4)));
    assert_eq!(jwks_of(&[padded]).keys().len(), 1);

    // Nothing usable: an error that says why.
    let err = KeySet::from_jwks(&testkit::jwks(&skipped[..3])).unwrap_err();
    assert!(
        err.contains("no usable signature key") && err.contains("P-521"),
        "{err}"
    );
    // A shared secret in a JWKS is refused outright.
    let oct = json!({"kty": "oct", "k": "c2VjcmV0", "kid": "h"});
    let err = KeySet::from_jwks(&testkit::jwks(&[keys[0].clone(), oct])).unwrap_err();
    assert!(err.contains("\"oct\""), "{err}");
    for bad in [
        &b"not json"[..],
        b"{}",
        b"{\"keys\": 5}",
        b"{\"keys\": [5]}",
    ] {
        assert!(KeySet::from_jwks(bad).is_err());
    }
}

#[test]
fn merged_sets_and_peeked_issuers() {
    let (a, b) = (testkit::ed25519(), testkit::p256());
    let set = KeySet::merge([
        KeySet::from_pem(a.public_pem.as_bytes()).unwrap(),
        KeySet::from_pem(b.public_pem.as_bytes()).unwrap(),
    ]);
    assert_eq!(set.keys().len(), 2);
    let v = validation(&[Algorithm::EdDSA, Algorithm::ES256]);
    for token in [
        testkit::token(&a, Algorithm::EdDSA, None, &claims()),
        testkit::token(&b, Algorithm::ES256, None, &claims()),
    ] {
        assert!(verify(&token, &set, &v, NOW).is_ok());
        assert_eq!(peek_issuer(&token).as_deref(), Ok(ISS));
    }
    let no_iss = testkit::hmac_token(SECRET, Algorithm::HS256, &json!({"exp": 1}));
    assert_eq!(peek_issuer(&no_iss), Err(JwtError::Issuer));
    assert!(matches!(peek_issuer("a.b"), Err(JwtError::Malformed(_))));
    assert!(matches!(
        peek_issuer("a.%%%.c"),
        Err(JwtError::Malformed(_))
    ));
}

/// The claims of [`claims`] as JSON text, with `extra` written before its
/// closing brace (`,"sub":"bob"` repeats a member).
fn claims_text(extra: &str) -> String {
    let base = claims().to_string();
    format!("{}{extra}}}", &base[..base.len() - 1])
}

/// An HS256 header, as JSON text.
const HS_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// `verify` of an HS256 token whose header and claims are `header` and
/// `claims`, as written.
fn verify_text(header: &str, claims: &str) -> Result<Verified, JwtError> {
    let token = testkit::hmac_text_token(SECRET, header, claims);
    let set = KeySet::from_secret(SECRET);
    verify(&token, &set, &validation(&[Algorithm::HS256]), NOW)
}

const HEADER_REPEATS: JwtError = JwtError::Malformed("header repeats a member");
const PAYLOAD_REPEATS: JwtError = JwtError::Malformed("payload repeats a member");

#[test]
fn a_header_that_repeats_a_member_refuses_the_token() {
    assert!(verify_text(HS_HEADER, &claims_text("")).is_ok());
    let headers = [
        // alg: the same value twice, or one that passes and one that must not.
        r#"{"alg":"HS256","typ":"JWT","alg":"HS256"}"#,
        r#"{"alg":"none","alg":"HS256"}"#,
        r#"{"alg":"HS256","alg":"none"}"#,
        r#"{"alg":"RS256","alg":"HS256"}"#,
        // kid and typ.
        r#"{"alg":"HS256","kid":"a","kid":"b"}"#,
        r#"{"alg":"HS256","kid":"a","kid":"a"}"#,
        r#"{"alg":"HS256","typ":"JWT","typ":"at+jwt"}"#,
        // Spelt with an escape, and inside a member nobody reads.
        r#"{"alg":"HS256","\u0061lg":"HS256"}"#,
        r#"{"alg":"HS256","k\u0069d":"x","kid":"x"}"#,
        r#"{"alg":"HS256","x5c":[{"a":1,"a":1}]}"#,
    ];
    for header in headers {
        assert_eq!(
            verify_text(header, &claims_text("")),
            Err(HEADER_REPEATS),
            "{header}"
        );
    }
}

#[test]
fn registered_claims_that_repeat_refuse_the_token() {
    let later = NOW + 6000;
    let cases = [
        ("sub", r#","sub":"bob""#.to_string()),
        ("sub, the same value", r#","sub":"alice""#.to_string()),
        ("exp, later", format!(r#","exp":{later}"#)),
        ("exp, past", r#","exp":1"#.to_string()),
        ("iss", r#","iss":"https://evil.example/""#.to_string()),
        ("aud", r#","aud":["api","admin"]"#.to_string()),
        ("nbf", format!(r#","nbf":{NOW},"nbf":{later}"#)),
        ("iat", format!(r#","iat":{NOW}"#)),
    ];
    for (what, extra) in cases {
        assert_eq!(
            verify_text(HS_HEADER, &claims_text(&extra)),
            Err(PAYLOAD_REPEATS),
            "{what}"
        );
    }
}

#[test]
fn custom_and_nested_claims_that_repeat_refuse_the_token() {
    // The same names at different levels are no repetition.
    let fine = claims_text(r#","org":{"id":"acme","sub":"x","org":{"id":"y"}},"tenant":"t""#);
    let verified = verify_text(HS_HEADER, &fine).unwrap();
    assert_eq!(claim(&verified.claims, "org.id"), Some(&json!("acme")));
    let cases = [
        ("org.id", r#","org":{"id":"acme","id":"evil"}"#),
        (
            "a nested object",
            r#","org":{"meta":{"plan":"gold","plan":"free"}}"#,
        ),
        (
            "in an array",
            r#","roles":[{"r":"read"},{"r":"read","r":"admin"}]"#,
        ),
        ("tenant", r#","tenant":"acme","tenant":"evil""#),
        ("plan", r#","plan":"free","plan":"gold""#),
        (
            "a namespaced claim",
            r#","https://x.example/t":"a","https://x.example/t":"b""#,
        ),
        ("the empty name", r#","":1,"":2"#),
    ];
    for (what, extra) in cases {
        assert_eq!(
            verify_text(HS_HEADER, &claims_text(extra)),
            Err(PAYLOAD_REPEATS),
            "{what}"
        );
    }
}

#[test]
fn names_are_compared_unescaped() {
    for extra in [
        r#","\u0073ub":"bob""#,
        r#","s\u0075\u0062":"bob""#,
        r#","\u0069ss":"https://evil.example/""#,
        r#","org":{"id":"a","\u0069d":"b"}"#,
    ] {
        assert_eq!(
            verify_text(HS_HEADER, &claims_text(extra)),
            Err(PAYLOAD_REPEATS),
            "{extra}"
        );
    }
    // An escaped name that differs is another member.
    let other = claims_text(r#","\u0053ub":"bob""#);
    assert_eq!(verify_text(HS_HEADER, &other).unwrap().claims["Sub"], "bob");
}

#[test]
fn no_issuer_is_peeked_from_a_payload_that_repeats_one() {
    let header = HS_HEADER;
    let ok = testkit::hmac_text_token(SECRET, header, &claims_text(""));
    assert_eq!(peek_issuer(&ok).as_deref(), Ok(ISS));
    for extra in [
        r#","iss":"https://evil.example/""#,
        r#","\u0069ss":"https://evil.example/""#,
        r#","sub":"bob""#,
    ] {
        let token = testkit::hmac_text_token(SECRET, header, &claims_text(extra));
        assert_eq!(peek_issuer(&token), Err(PAYLOAD_REPEATS), "{extra}");
    }
}

#[test]
fn only_canonical_unpadded_base64url_parts_verify() {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET);
    let sign = |m: &[u8]| ring::hmac::sign(&key, m).as_ref().to_vec();
    let set = KeySet::from_secret(SECRET);
    let v = validation(&[Algorithm::HS256]);
    let check = |header: &str, payload: &str| {
        verify(
            &testkit::token_of_parts(header, payload, sign),
            &set,
            &v,
            NOW,
        )
    };
    // A payload whose base64url holds `-` or `_` and ends in a partial
    // group (so it would take padding, and has trailing bits).
    let payload = (0..300)
        .map(|n| {
            let mut c = claims();
            c["pad"] = json!(format!("{}~~>", "?".repeat(n)));
            URL_SAFE_NO_PAD.encode(c.to_string())
        })
        .find(|p| p.len() % 4 == 2 && p.contains(['-', '_']))
        .unwrap();
    let header = URL_SAFE_NO_PAD.encode(HS_HEADER);
    assert!(check(&header, &payload).is_ok());
    let not_payload = Err(JwtError::Malformed(
        "payload is not a base64url JSON object",
    ));
    // Padding.
    assert_eq!(check(&header, &format!("{payload}==")), not_payload);
    let spaced = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256" }"#);
    assert!(check(&spaced, &payload).is_ok());
    assert_eq!(
        check(&format!("{spaced}=="), &payload),
        Err(JwtError::Malformed("header is not a base64url JSON object"))
    );
    // The standard alphabet.
    let standard = payload.replace('-', "+").replace('_', "/");
    assert_eq!(check(&header, &standard), not_payload);
    // Trailing bits set: the same bytes if they were ignored.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut loose = payload.clone().into_bytes();
    let last = loose.pop().unwrap();
    let at = ALPHABET.iter().position(|&c| c == last).unwrap();
    loose.push(ALPHABET[at | 1]);
    let loose = String::from_utf8(loose).unwrap();
    assert_eq!(
        base64::engine::GeneralPurpose::new(
            &base64::alphabet::URL_SAFE,
            base64::engine::GeneralPurposeConfig::new()
                .with_encode_padding(false)
                .with_decode_allow_trailing_bits(true)
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
        )
        .decode(&loose)
        .unwrap(),
        URL_SAFE_NO_PAD.decode(&payload).unwrap()
    );
    assert_eq!(check(&header, &loose), not_payload);
    // A padded signature (32 bytes of HS256 take one `=`).
    let token = testkit::token_of_parts(&header, &payload, sign);
    assert!(token.ends_with(|c: char| c != '='));
    assert_eq!(
        verify(&format!("{token}="), &set, &v, NOW),
        Err(JwtError::Malformed("signature is not base64url"))
    );
}
