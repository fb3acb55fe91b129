//! Keys generated at run time and tokens signed with them (ring signs; RSA
//! keys come from the `rsa` crate, since ring cannot generate them), for
//! this module's tests.

use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384};
use ring::rand::SystemRandom;
use ring::{hmac, signature};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

use super::Algorithm;

/// A private key to sign with, and its public forms.
pub(crate) struct TestKey {
    signer: Signer,
    /// The public key as a `PUBLIC KEY` PEM block.
    pub(crate) public_pem: String,
    /// A self-signed certificate for it, PEM.
    pub(crate) cert_pem: String,
    /// Its public JWK (no `kid`, `alg` or `use`).
    pub(crate) jwk: Value,
}

enum Signer {
    Rsa(signature::RsaKeyPair),
    Ecdsa(signature::EcdsaKeyPair),
    Ed25519(signature::Ed25519KeyPair),
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// One RSA 2048 key for the whole test binary (generation is slow).
pub(crate) fn rsa() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

/// A second RSA key, for "signed by another key" cases.
pub(crate) fn rsa_other() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

fn rsa_key() -> TestKey {
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let pkcs8 = private.to_pkcs8_der().unwrap();
    let public = private.to_public_key();
    let jwk = json!({
        "kty": "RSA",
        "n": b64(public.n().to_bytes_be()),
        "e": b64(public.e().to_bytes_be()),
    });
    let pkcs8_der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
    let pair = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8_der, &rcgen::PKCS_RSA_SHA256).unwrap();
    TestKey {
        signer: Signer::Rsa(signature::RsaKeyPair::from_pkcs8(pkcs8.as_bytes()).unwrap()),
        public_pem: public.to_public_key_pem(LineEnding::LF).unwrap(),
        cert_pem: certificate(&pair),
        jwk,
    }
}

/// A new P-256 key.
pub(crate) fn p256() -> TestKey {
    ec_key(
        &PKCS_ECDSA_P256_SHA256,
        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        "P-256",
    )
}

/// A new P-384 key.
pub(crate) fn p384() -> TestKey {
    ec_key(
        &PKCS_ECDSA_P384_SHA384,
        &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
        "P-384",
    )
}

fn ec_key(
    rcgen_alg: &'static rcgen::SignatureAlgorithm,
    ring_alg: &'static signature::EcdsaSigningAlgorithm,
    crv: &str,
) -> TestKey {
    let pair = KeyPair::generate_for(rcgen_alg).unwrap();
    let signer =
        signature::EcdsaKeyPair::from_pkcs8(ring_alg, &pair.serialize_der(), &SystemRandom::new())
            .unwrap();
    let point = signature::KeyPair::public_key(&signer).as_ref().to_vec();
    let half = (point.len() - 1) / 2;
    let jwk = json!({
        "kty": "EC",
        "crv": crv,
        "x": b64(&point[1..1 + half]),
        "y": b64(&point[1 + half..]),
    });
    TestKey {
        signer: Signer::Ecdsa(signer),
        public_pem: pair.public_key_pem(),
        cert_pem: certificate(&pair),
        jwk,
    }
}

/// A new Ed25519 key.
pub(crate) fn ed25519() -> TestKey {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let signer =
        signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pair.serialize_der()).unwrap();
    let x = signature::KeyPair::public_key(&signer).as_ref().to_vec();
    TestKey {
        signer: Signer::Ed25519(signer),
        public_pem: pair.public_key_pem(),
        cert_pem: certificate(&pair),
        jwk: json!({"kty": "OKP", "crv": "Ed25519", "x": b64(x)}),
    }
}

fn certificate(pair: &KeyPair) -> String {
    CertificateParams::new(vec!["issuer.example".to_string()])
        .unwrap()
        .self_signed(pair)
        .unwrap()
        .pem()
}

impl TestKey {
    /// Its JWK with `kid` (and `alg` when given).
    pub(crate) fn jwk_with(&self, kid: &str, alg: Option<Algorithm>) -> Value {
        let mut jwk = self.jwk.clone();
        jwk["kid"] = json!(kid);
        if let Some(alg) = alg {
            jwk["alg"] = json!(alg.name());
        }
        jwk
    }

    /// `alg`'s signature of `message` with this key.
    pub(crate) fn sign(&self, alg: Algorithm, message: &[u8]) -> Vec<u8> {
        use Algorithm::*;
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding = match alg {
                    RS256 => &signature::RSA_PKCS1_SHA256,
                    RS384 => &signature::RSA_PKCS1_SHA384,
                    RS512 => &signature::RSA_PKCS1_SHA512,
                    PS256 => &signature::RSA_PSS_SHA256,
                    PS384 => &signature::RSA_PSS_SHA384,
                    PS512 => &signature::RSA_PSS_SHA512,
                    _ => panic!("{alg} with an RSA key"),
                };
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, message, &mut sig).unwrap();
                sig
            }
            Signer::Ecdsa(pair) => pair.sign(&rng, message).unwrap().as_ref().to_vec(),
            Signer::Ed25519(pair) => pair.sign(message).as_ref().to_vec(),
        }
    }
}

/// A compact JWS of `header` and `claims`, signed by `sign`.
pub(crate) fn token_with(
    header: &Value,
    claims: &Value,
    sign: impl Fn(&[u8]) -> Vec<u8>,
) -> String {
    token_of_parts(&b64(header.to_string()), &b64(claims.to_string()), sign)
}

/// A compact JWS of two parts as written (base64url or not), signed by
/// `sign`: for tokens a JSON value cannot express (a repeated member, a
/// padded part).
pub(crate) fn token_of_parts(
    header: &str,
    payload: &str,
    sign: impl Fn(&[u8]) -> Vec<u8>,
) -> String {
    let input = format!("{header}.{payload}");
    let sig = sign(input.as_bytes());
    format!("{input}.{}", b64(sig))
}

/// An HS256 token of a header and claims written as JSON text, signed
/// with `secret`.
pub(crate) fn hmac_text_token(secret: &[u8], header: &str, claims: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    token_of_parts(&b64(header), &b64(claims), |m| {
        hmac::sign(&key, m).as_ref().to_vec()
    })
}

/// A token signed by `key` with `alg`, `kid` in its header when given.
pub(crate) fn token(key: &TestKey, alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let mut header = json!({"alg": alg.name(), "typ": "JWT"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    token_with(&header, claims, |m| key.sign(alg, m))
}

/// An HMAC token with `secret`.
pub(crate) fn hmac_token(secret: &[u8], alg: Algorithm, claims: &Value) -> String {
    let digest = match alg {
        Algorithm::HS256 => hmac::HMAC_SHA256,
        Algorithm::HS384 => hmac::HMAC_SHA384,
        Algorithm::HS512 => hmac::HMAC_SHA512,
        _ => panic!("{alg} is not HMAC"),
    };
    let key = hmac::Key::new(digest, secret);
    let header = json!({"alg": alg.name(), "typ": "JWT"});
    token_with(&header, claims, |m| hmac::sign(&key, m).as_ref().to_vec())
}

/// A JWKS document of `keys`.
pub(crate) fn jwks(keys: &[Value]) -> Vec<u8> {
    json!({ "keys": keys }).to_string().into_bytes()
}
