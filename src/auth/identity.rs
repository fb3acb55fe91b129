//! Who a verified request comes from (docs/configuration/consumers.md): the
//! consumer, its tenant and plan, the verified token's claims and the
//! consumer's configured attributes. Read by identity key sources
//! (`consumer`, `tenant`, `plan`, `claim:NAME`, `attr:NAME`), by the access
//! log and by the identity headers; only ever built from a credential the
//! gateway verified.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::jwt::{claim, Verified};
use crate::config::ConsumerConfig;

/// A verified consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The consumer's name.
    pub consumer: Arc<str>,
    /// Its tenant, if it has one.
    pub tenant: Option<Arc<str>>,
    /// Its plan, if it has one.
    pub plan: Option<Arc<str>>,
    /// The JWT that verified it, if one did (its claims).
    pub claims: Option<Arc<Verified>>,
    /// Its entry in `consumers.list` (or the consumers file), if it has
    /// one: the source of `attr:NAME`.
    pub entry: Option<Arc<ConsumerConfig>>,
}

impl Identity {
    /// The consumer of a `consumers.list` entry, as an API key or a
    /// certificate naming it verifies it.
    pub fn of_entry(entry: &Arc<ConsumerConfig>) -> Identity {
        Identity {
            consumer: entry.name.as_str().into(),
            tenant: entry.tenant.as_deref().map(Arc::from),
            plan: entry.plan.as_deref().map(Arc::from),
            claims: None,
            entry: Some(entry.clone()),
        }
    }

    /// The value of claim `path` (`org.id` reads `{"org": {"id": ..}}`) as
    /// key bytes: a string as itself, any other value as its JSON text.
    /// `None` without a verified token, for a missing claim, or `null`.
    pub fn claim(&self, path: &str) -> Option<Cow<'_, [u8]>> {
        let value = claim(&self.claims.as_deref()?.claims, path)?;
        match value {
            Value::Null => None,
            Value::String(s) => Some(Cow::Borrowed(s.as_bytes())),
            other => Some(Cow::Owned(other.to_string().into_bytes())),
        }
    }

    /// The consumer's attribute `name`, as configured (numbers and booleans
    /// as their text).
    pub fn attr(&self, name: &str) -> Option<&str> {
        let entry = self.entry.as_deref()?;
        entry
            .attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl crate::limit::key::Consumer for Identity {
    fn name(&self) -> &str {
        &self.consumer
    }
    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
    fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }
    fn claim(&self, path: &str) -> Option<Cow<'_, [u8]>> {
        Identity::claim(self, path)
    }
    fn attr(&self, name: &str) -> Option<&str> {
        Identity::attr(self, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_claims(json: &str) -> Identity {
        let claims: serde_json::Map<String, Value> = serde_json::from_str(json).unwrap();
        Identity {
            consumer: "c".into(),
            tenant: None,
            plan: None,
            claims: Some(Arc::new(Verified { claims, exp: 0 })),
            entry: None,
        }
    }

    #[test]
    fn claims_as_key_bytes() {
        let id = with_claims(
            r#"{"sub":"u1","org":{"id":"acme","n":7,"tags":["a"]},"x.y":"flat","nil":null,"ok":true}"#,
        );
        let c = |p: &str| {
            id.claim(p)
                .map(|v| String::from_utf8(v.into_owned()).unwrap())
        };
        assert_eq!(c("sub").as_deref(), Some("u1"));
        assert_eq!(c("org.id").as_deref(), Some("acme"));
        assert_eq!(c("org.n").as_deref(), Some("7"));
        assert_eq!(c("org.tags").as_deref(), Some("[\"a\"]"));
        assert_eq!(c("x.y").as_deref(), Some("flat"));
        assert_eq!(c("ok").as_deref(), Some("true"));
        assert_eq!(c("nil"), None);
        assert_eq!(c("org.missing"), None);
        assert_eq!(c("sub.deeper"), None);
    }

    #[test]
    fn attributes_come_from_the_entry() {
        let entry = Arc::new(ConsumerConfig {
            name: "acme-batch".into(),
            tenant: Some("acme".into()),
            plan: Some("gold".into()),
            keys: vec![],
            attributes: vec![("billing_day".into(), "15".into())],
        });
        let id = Identity::of_entry(&entry);
        assert_eq!(&*id.consumer, "acme-batch");
        assert_eq!(id.tenant.as_deref(), Some("acme"));
        assert_eq!(id.attr("billing_day"), Some("15"));
        assert_eq!(id.attr("tz"), None);
        assert_eq!(id.claim("sub"), None);
    }
}
