//! The consumers of `consumers.list` and the consumers file, by name and by
//! API-key digest (docs/configuration/consumers.md).
//!
//! An API key is never kept or compared in clear: the config holds SHA-256
//! digests, a presented key is hashed and its digest looked up in a hash
//! map, so no comparison of secrets can leak a key through its timing.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::{ConsumerConfig, ConsumersConfig, CredentialKind};

/// The configured consumers.
#[derive(Debug, Default)]
pub struct Registry {
    by_name: HashMap<Arc<str>, Arc<ConsumerConfig>>,
    by_digest: HashMap<[u8; 32], Arc<ConsumerConfig>>,
    /// In config order, for `GET /consumers`.
    ordered: Vec<Arc<ConsumerConfig>>,
}

impl Registry {
    /// The consumers of `config` (validated: names and digests unique).
    pub fn new(config: &ConsumersConfig) -> Registry {
        let mut registry = Registry::default();
        for c in &config.list {
            let entry = Arc::new(c.clone());
            for digest in &c.keys {
                registry.by_digest.insert(*digest, entry.clone());
            }
            registry
                .by_name
                .insert(c.name.as_str().into(), entry.clone());
            registry.ordered.push(entry);
        }
        registry
    }

    /// The consumer whose API key is `key`.
    pub fn by_key(&self, key: &[u8]) -> Option<&Arc<ConsumerConfig>> {
        self.by_digest.get(&digest(key))
    }

    /// The consumer called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<ConsumerConfig>> {
        self.by_name.get(name)
    }
}

/// SHA-256 of an API key.
pub fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

/// `sha256:<hex>`: how `consumers` spells a key (`tollgate hash-key`).
pub fn digest_text(key: &[u8]) -> String {
    format!("sha256:{}", hex::encode(digest(key)))
}

/// One consumer as `GET /consumers` shows it: never a key or a digest.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Listed<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its tenant.
    pub tenant: Option<&'a str>,
    /// Its plan.
    pub plan: Option<&'a str>,
    /// The credential kinds that can verify it: `api_key` when it has
    /// keys, and `jwt` / `mtls` when those are configured (a token's or a
    /// certificate's name may be its name).
    pub credentials: Vec<&'static str>,
    /// How many API keys it has.
    pub api_keys: usize,
    /// Its attributes.
    pub attributes: std::collections::BTreeMap<&'a str, &'a str>,
}

impl Registry {
    /// The listing of `GET /consumers`.
    pub fn listing<'a>(&'a self, config: &ConsumersConfig) -> Vec<Listed<'a>> {
        self.ordered
            .iter()
            .map(|c| {
                let credentials = config
                    .kinds()
                    .into_iter()
                    .filter(|k| *k != CredentialKind::ApiKey || !c.keys.is_empty())
                    .map(CredentialKind::name)
                    .collect();
                Listed {
                    name: &c.name,
                    tenant: c.tenant.as_deref(),
                    plan: c.plan.as_deref(),
                    credentials,
                    api_keys: c.keys.len(),
                    attributes: c
                        .attributes
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_digest_only() {
        let config = ConsumersConfig {
            list: vec![ConsumerConfig {
                name: "acme".into(),
                tenant: Some("acme-inc".into()),
                plan: None,
                keys: vec![digest(b"foo"), digest(b"bar")],
                attributes: vec![],
            }],
            api_keys: Some(crate::config::ApiKeysConfig {
                header: Some(http::HeaderName::from_static("x-api-key")),
                query: None,
                hide: false,
            }),
            ..Default::default()
        };
        let r = Registry::new(&config);
        assert_eq!(r.by_key(b"foo").map(|c| c.name.as_str()), Some("acme"));
        assert_eq!(r.by_key(b"bar").map(|c| c.name.as_str()), Some("acme"));
        assert!(r.by_key(b"fo").is_none());
        assert!(r.by_key(b"").is_none());
        // The digest of "foo" is the one the docs show.
        assert_eq!(
            digest_text(b"foo"),
            "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
        );
        let listed = r.listing(&config);
        assert_eq!(listed[0].credentials, vec!["api_key"]);
        assert_eq!(listed[0].api_keys, 2);
        let json = serde_json::to_string(&listed).unwrap();
        assert!(!json.contains("2c26b4"), "{json}");
    }
}
