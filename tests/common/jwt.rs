//! Signing keys generated at run time and the tokens they sign, for the JWT
//! tests: RSA from the `rsa` crate (ring cannot generate RSA keys; it signs
//! with one from its PKCS#8), EC and Ed25519 from rcgen, every signature
//! made by ring. Each key also comes as a `PUBLIC KEY` PEM, a self-signed
//! certificate and a public JWK, the three forms an issuer's keys take in
//! the config.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rcgen::{CertificateParams, KeyPair};
use ring::rand::SystemRandom;
use ring::{hmac, signature};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

/// A private key to sign with, and its public forms.
pub struct Key {
    signer: Signer,
    /// The public key as a `PUBLIC KEY` PEM block.
    pub public_pem: String,
    /// A self-signed certificate for it, PEM.
    pub cert_pem: String,
    /// Its public JWK (no `kid`, `alg` or `use`).
    pub jwk: Value,
}

enum Signer {
    Rsa(signature::RsaKeyPair),
    Ecdsa(signature::EcdsaKeyPair),
    Ed25519(signature::Ed25519KeyPair),
}

/// Base64url without padding, as JWS writes everything.
pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The RSA 2048 key of the test binary (generation takes a while: one).
pub fn rsa() -> &'static Key {
    static KEY: OnceLock<Key> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

/// A second RSA key, for rotation.
pub fn rsa_other() -> &'static Key {
    static KEY: OnceLock<Key> = OnceLock::new();
    KEY.get_or_init(rsa_key)
}

fn rsa_key() -> Key {
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let pkcs8 = private.to_pkcs8_der().unwrap();
    let public = private.to_public_key();
    let pkcs8_der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
    let pair = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8_der, &rcgen::PKCS_RSA_SHA256).unwrap();
    Key {
        signer: Signer::Rsa(signature::RsaKeyPair::from_pkcs8(pkcs8.as_bytes()).unwrap()),
        public_pem: public.to_public_key_pem(LineEnding::LF).unwrap(),
        cert_pem: certificate(&pair),
        jwk: json!({
            "kty": "RSA",
            "n": b64(public.n().to_bytes_be()),
            "e": b64(public.e().to_bytes_be()),
        }),
    }
}

/// A new P-256 key (ES256).
pub fn p256() -> Key {
    ec_key(
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        "P-256",
    )
}

/// A new P-384 key (ES384).
pub fn p384() -> Key {
    ec_key(
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
        "P-384",
    )
}

fn ec_key(
    rcgen_alg: &'static rcgen::SignatureAlgorithm,
    ring_alg: &'static signature::EcdsaSigningAlgorithm,
    crv: &str,
) -> Key {
    let pair = KeyPair::generate_for(rcgen_alg).unwrap();
    let signer =
        signature::EcdsaKeyPair::from_pkcs8(ring_alg, &pair.serialize_der(), &SystemRandom::new())
            .unwrap();
    // The uncompressed point: 0x04 || x || y.
    let point = signature::KeyPair::public_key(&signer).as_ref().to_vec();
    let half = (point.len() - 1) / 2;
    Key {
        signer: Signer::Ecdsa(signer),
        public_pem: pair.public_key_pem(),
        cert_pem: certificate(&pair),
        jwk: json!({
            "kty": "EC",
            "crv": crv,
            "x": b64(&point[1..1 + half]),
            "y": b64(&point[1 + half..]),
        }),
    }
}

/// A new Ed25519 key (EdDSA).
pub fn ed25519() -> Key {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let signer =
        signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pair.serialize_der()).unwrap();
    let x = signature::KeyPair::public_key(&signer).as_ref().to_vec();
    Key {
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

impl Key {
    /// Its public JWK with `kid`.
    pub fn jwk_kid(&self, kid: &str) -> Value {
        let mut jwk = self.jwk.clone();
        jwk["kid"] = json!(kid);
        jwk
    }

    /// The signature of `message` by `alg` (`RS256`, `PS384`, `ES256`,
    /// `EdDSA`...) with this key.
    pub fn sign(&self, alg: &str, message: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding = match alg {
                    "RS256" => &signature::RSA_PKCS1_SHA256,
                    "RS384" => &signature::RSA_PKCS1_SHA384,
                    "RS512" => &signature::RSA_PKCS1_SHA512,
                    "PS256" => &signature::RSA_PSS_SHA256,
                    "PS384" => &signature::RSA_PSS_SHA384,
                    "PS512" => &signature::RSA_PSS_SHA512,
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

    /// A token of `claims` signed with `alg`, `kid` in its header when
    /// given.
    pub fn token(&self, alg: &str, kid: Option<&str>, claims: &Value) -> String {
        let mut header = json!({"alg": alg, "typ": "JWT"});
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        token_with(&header, claims, |m| self.sign(alg, m))
    }
}

/// A compact JWS of `header` and `claims`, signed by `sign`.
pub fn token_with(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    token_of_text(&header.to_string(), &claims.to_string(), sign)
}

/// A compact JWS of a header and claims written as JSON text (which may
/// say what a `Value` cannot: a member twice), signed by `sign`.
pub fn token_of_text(header: &str, claims: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let input = format!("{}.{}", b64(header), b64(claims));
    let sig = sign(input.as_bytes());
    format!("{input}.{}", b64(sig))
}

/// An HMAC token (`HS256`, `HS384`, `HS512`) of `claims` with `secret`.
pub fn hmac_token(secret: &[u8], alg: &str, claims: &Value) -> String {
    let digest = match alg {
        "HS256" => hmac::HMAC_SHA256,
        "HS384" => hmac::HMAC_SHA384,
        "HS512" => hmac::HMAC_SHA512,
        _ => panic!("{alg} is not HMAC"),
    };
    let key = hmac::Key::new(digest, secret);
    let header = json!({"alg": alg, "typ": "JWT"});
    token_with(&header, claims, |m| hmac::sign(&key, m).as_ref().to_vec())
}

/// A JWKS document of `keys`.
pub fn jwks(keys: &[Value]) -> Vec<u8> {
    json!({ "keys": keys }).to_string().into_bytes()
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims from `iss` for `aud` naming `sub`, valid for an hour from now.
pub fn claims(iss: &str, aud: &str, sub: &str) -> Value {
    json!({"iss": iss, "aud": aud, "sub": sub, "iat": now(), "exp": now() + 3600})
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
