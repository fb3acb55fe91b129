//! ES256 tokens for benches/e2e/run (the JWT rows of `--only auth`) and
//! benches/e2e/callgrind (`jwt`): a fresh P-256 key pair, its public key
//! written as a PEM `PUBLIC KEY` (SPKI) block for the issuer's `keys: [{pem: FILE}]`,
//! and N distinct signed tokens on stdout, one per line.
//!
//! ```text
//! bench_tokens N PEM_OUT ISSUER AUDIENCE [TTL_SECONDS]
//! e.g. bench_tokens 60000 /tmp/jwt.pem https://bench.invalid/ bench 21600
//! ```
//!
//! Every token has the same header (`{"alg":"ES256","typ":"JWT"}`, no
//! `kid`) and claims `iss`, `aud`, `sub` ("bench"), `iat` (now), `exp` (TTL
//! seconds from now, default 6 h) and a distinct `jti` (its line number
//! from 0), so no two tokens are alike: cycling more of them than the gateway's verified-token
//! cache holds (10,000) makes nearly every request a signature check.
//! Signed with *ring* (ECDSA P-256, SHA-256, the fixed r||s form JWS uses);
//! only the encoding (base64url, JSON, the SPKI prefix) is written here.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};

/// The DER of a P-256 SPKI before its 65-byte uncompressed point:
/// `SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING` (66
/// bytes: no unused bits, then the point) `}`.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(4..=5).contains(&args.len()) {
        bail!("usage: bench_tokens N PEM_OUT ISSUER AUDIENCE [TTL_SECONDS]");
    }
    let n: u64 = args[0].parse().context("N")?;
    let ttl: u64 = match args.get(4) {
        Some(s) => s.parse().context("TTL_SECONDS")?,
        None => 6 * 3600,
    };
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| anyhow::anyhow!("P-256 key generation failed"))?;
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|e| anyhow::anyhow!("the generated key does not load: {e}"))?;
    std::fs::write(&args[1], public_pem(key.public_key().as_ref()))
        .with_context(|| format!("writing {}", args[1]))?;

    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","typ":"JWT"}"#);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for jti in 0..n {
        let claims = serde_json::json!({
            "iss": args[2], "aud": args[3], "sub": "bench",
            "iat": now, "exp": now + ttl, "jti": jti.to_string(),
        });
        let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
        let sig = key
            .sign(&rng, signing_input.as_bytes())
            .map_err(|_| anyhow::anyhow!("signing failed"))?;
        writeln!(
            out,
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(sig.as_ref())
        )?;
    }
    out.flush()?;
    Ok(())
}

/// The public key `point` (uncompressed, 65 bytes) as a PEM `PUBLIC KEY`.
fn public_pem(point: &[u8]) -> String {
    let mut der = P256_SPKI_PREFIX.to_vec();
    der.extend_from_slice(point);
    let b64 = STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END PUBLIC KEY-----\n");
    pem
}
