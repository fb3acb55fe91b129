//! `store:`: the backend and the fields it takes, TLS to Redis, the key
//! prefix, and what the store's settings mean for the others.

use std::net::Ipv6Addr;
use std::time::Duration;

use super::{redact, Ctx, Result};
use crate::config::model::{OnError, StoreBackend, StoreConfig, StoreTls, TimeSource};
use crate::config::raw::{RawBackend, RawStore, RawStoreTls};

impl Ctx<'_> {
    /// `store:`, with the documented defaults.
    pub(super) fn store(&mut self, mut raw: RawStore) -> Result<StoreConfig> {
        let kind = raw.backend.unwrap_or(RawBackend::Memory);
        let urls = self.redis_urls(raw.url.as_deref(), raw.urls.take())?;
        self.backend_fields(kind, &raw, &urls)?;
        let backend = self.backend(kind, &raw, &urls)?;
        let tls = match raw.tls {
            None => None,
            Some(t) => Some(self.store_tls(t, &backend, raw.url.as_deref(), &urls)?),
        };
        let prefix = self.key_prefix(raw.prefix)?;
        let timeout = self.positive(
            "store.timeout",
            raw.timeout.map(|d| d.0),
            Duration::from_millis(50),
        )?;
        self.warn_store(kind, raw.on_error, raw.clock);
        Ok(StoreConfig {
            backend,
            prefix,
            timeout,
            on_error: raw.on_error.unwrap_or(OnError::Local),
            clock: raw.clock.unwrap_or(TimeSource::Store),
            tls,
        })
    }

    /// Checks `store.url` and each of `store.urls`; returns the latter.
    fn redis_urls(&self, url: Option<&str>, urls: Option<Vec<String>>) -> Result<Vec<String>> {
        if let Some(url) = url {
            check_redis_url(url).map_err(|m| self.err("store.url", m))?;
        }
        let urls = urls.unwrap_or_default();
        for (i, url) in urls.iter().enumerate() {
            check_redis_url(url).map_err(|m| self.err(&format!("store.urls[{i}]"), m))?;
        }
        Ok(urls)
    }

    /// The fields of another backend are refused, never ignored; the URLs
    /// a backend of several servers needs are required.
    fn backend_fields(&self, kind: RawBackend, raw: &RawStore, urls: &[String]) -> Result<()> {
        let name = backend_name(kind);
        let many = matches!(kind, RawBackend::RedisSentinel | RawBackend::RedisCluster);
        if !many && !urls.is_empty() {
            return Err(self.err(
                "store.urls",
                format!("`urls` (seed nodes, sentinels) are for redis_cluster and redis_sentinel, not {name}; use `url`"),
            ));
        }
        if kind != RawBackend::RedisSentinel && raw.master_name.is_some() {
            return Err(self.err(
                "store.master_name",
                format!("`master_name` is for redis_sentinel, not {name}"),
            ));
        }
        if kind == RawBackend::RedisCluster && raw.url.is_some() {
            return Err(self.err(
                "store.url",
                "redis_cluster takes its seed nodes in `urls`, not `url`",
            ));
        }
        if many && urls.is_empty() {
            return Err(self.err(
                "store.urls",
                format!(
                    "{name} needs at least one URL in `urls` (the {})",
                    if kind == RawBackend::RedisCluster {
                        "seed nodes"
                    } else {
                        "sentinels"
                    }
                ),
            ));
        }
        Ok(())
    }

    /// The backend of `kind`, from fields already checked to be its own.
    fn backend(
        &mut self,
        kind: RawBackend,
        raw: &RawStore,
        urls: &[String],
    ) -> Result<StoreBackend> {
        Ok(match kind {
            RawBackend::Redis => StoreBackend::Redis {
                url: raw
                    .url
                    .clone()
                    .unwrap_or_else(|| "redis://127.0.0.1:6379/0".to_owned()),
            },
            RawBackend::RedisCluster => StoreBackend::Cluster {
                seeds: urls.to_vec(),
            },
            RawBackend::RedisSentinel => self.sentinel(raw, urls)?,
            RawBackend::Memory => {
                if raw.url.is_some() {
                    self.warnings
                        .push("store.url has no effect with backend: memory".to_owned());
                }
                StoreBackend::Memory
            }
        })
    }

    /// `redis_sentinel`: the master's name, and a `url` (if any) whose host
    /// is that name.
    fn sentinel(&self, raw: &RawStore, urls: &[String]) -> Result<StoreBackend> {
        let Some(master_name) = raw.master_name.clone().filter(|m| !m.trim().is_empty()) else {
            return Err(self.err(
                "store.master_name",
                "redis_sentinel needs `master_name`, the service the sentinels monitor",
            ));
        };
        if let Some(url) = &raw.url {
            if redis_url_host(url) != Some(master_name.as_str()) {
                return Err(self.err(
                    "store.url",
                    format!("with redis_sentinel, `url` gives the master's scheme, credentials and database, and its host is the master name: expected \"redis://[user:password@]{master_name}[/db]\", got \"{}\"", redact(url)),
                ));
            }
        }
        Ok(StoreBackend::Sentinel {
            sentinels: urls.to_vec(),
            master_name,
            master: raw.url.clone(),
        })
    }

    /// `store.tls`: refused unless some URL the store uses is `rediss://`;
    /// its PEM files read and checked here, so a bad one names its field.
    fn store_tls(
        &mut self,
        raw: RawStoreTls,
        backend: &StoreBackend,
        url: Option<&str>,
        urls: &[String],
    ) -> Result<StoreTls> {
        let rediss = url
            .into_iter()
            .chain(urls.iter().map(String::as_str))
            .any(|u| u.starts_with("rediss://"));
        if !rediss || matches!(backend, StoreBackend::Memory) {
            return Err(self.err(
                "store.tls",
                "`tls` needs a Redis backend with rediss:// URLs (redis:// is plain TCP)",
            ));
        }
        if raw.server_name.is_some() && matches!(backend, StoreBackend::Cluster { .. }) {
            return Err(self.err(
                "store.tls.server_name",
                "not with redis_cluster: each node is verified by the address the cluster announces for it (put those in its certificate)",
            ));
        }
        if let Some(name) = &raw.server_name {
            if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
                return Err(self.err(
                    "store.tls.server_name",
                    format!("\"{name}\" is not a host name or IP address"),
                ));
            }
        }
        let ca = match raw.ca {
            Some(path) => Some(self.pem("store.tls.ca", path, Pem::Certificates)?),
            None => None,
        };
        let client = match (raw.cert, raw.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((
                self.pem("store.tls.cert", cert, Pem::Certificates)?,
                self.pem("store.tls.key", key, Pem::Key)?,
            )),
            (Some(_), None) => {
                return Err(self.err("store.tls", "`cert` needs its `key` (a client certificate)"))
            }
            (None, Some(_)) => {
                return Err(self.err("store.tls", "`key` needs its `cert` (a client certificate)"))
            }
        };
        Ok(StoreTls {
            ca,
            client,
            server_name: raw.server_name,
        })
    }

    /// The PEM file at `path` (relative to the config's directory), read and
    /// checked to hold what `want` says.
    fn pem(&self, field: &str, path: std::path::PathBuf, want: Pem) -> Result<Vec<u8>> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let path = self.resolve(path);
        let shown = path.display();
        let bytes = std::fs::read(&path)
            .map_err(|e| self.err(field, format!("cannot read {shown}: {e}")))?;
        let ok = match want {
            Pem::Certificates => {
                let certs: std::result::Result<Vec<_>, _> =
                    CertificateDer::pem_slice_iter(&bytes).collect();
                match certs {
                    Ok(c) if !c.is_empty() => Ok(()),
                    Ok(_) => Err("no PEM certificate in it".to_owned()),
                    Err(e) => Err(format!("not PEM certificates: {e}")),
                }
            }
            Pem::Key => PrivateKeyDer::from_pem_slice(&bytes)
                .map(drop)
                .map_err(|e| format!("no PEM private key in it: {e}")),
        };
        ok.map_err(|m| self.err(field, format!("{shown}: {m}")))?;
        Ok(bytes)
    }

    /// `store.prefix`: every key starts with it.
    fn key_prefix(&self, raw: Option<String>) -> Result<String> {
        let prefix = raw.unwrap_or_else(|| "tollgate".to_owned());
        if prefix.is_empty() || prefix.chars().any(char::is_whitespace) {
            return Err(self.err(
                "store.prefix",
                format!("prefix must be non-empty and without whitespace, got \"{prefix}\""),
            ));
        }
        // Redis Cluster hashes the first `{...}` of a key: a brace in the
        // prefix would move every key off the slot of its own hash tag.
        if prefix.contains(['{', '}']) {
            return Err(self.err(
                "store.prefix",
                format!(
                    "prefix must not contain '{{' or '}}' (each key's hash tag decides its Redis Cluster slot), got \"{prefix}\""
                ),
            ));
        }
        Ok(prefix)
    }

    /// Settings valid but probably not meant with this backend.
    fn warn_store(
        &mut self,
        kind: RawBackend,
        on_error: Option<OnError>,
        clock: Option<TimeSource>,
    ) {
        if on_error == Some(OnError::Local) && kind == RawBackend::Memory {
            self.warnings.push(
                "store.on_error: local has no effect with backend: memory (the memory store does not fail)"
                    .to_owned(),
            );
        }
        // Shared state decided by each instance's own clock: windows start
        // and end when each instance thinks they do (README "Stores").
        if clock == Some(TimeSource::Local) && kind != RawBackend::Memory {
            self.warnings.push(format!(
                "store.clock: local with backend: {}: each instance decides with its own clock, so instances with skewed clocks can over-admit without bound on fixed_window, sliding_window and sliding_log at window boundaries; keep clock: store unless the clocks are synchronised",
                backend_name(kind)
            ));
        }
    }
}

/// A backend's name as written.
fn backend_name(kind: RawBackend) -> &'static str {
    match kind {
        RawBackend::Memory => "memory",
        RawBackend::Redis => "redis",
        RawBackend::RedisSentinel => "redis_sentinel",
        RawBackend::RedisCluster => "redis_cluster",
    }
}

/// What a PEM file of `store.tls` must hold.
#[derive(Debug, Clone, Copy)]
enum Pem {
    Certificates,
    Key,
}

/// The host of a Redis URL (after any credentials, without the port).
fn redis_url_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    Some(host_port.split(':').next().unwrap_or(host_port))
}

/// Checks a `redis://` or `rediss://` URL: `[user[:password]@]host[:port][/db][?query]`.
fn check_redis_url(url: &str) -> std::result::Result<(), String> {
    let bad = || {
        format!(
            "expected a redis:// or rediss:// URL like \"redis://127.0.0.1:6379/0\", got \"{}\"",
            redact(url)
        )
    };
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))
        .ok_or_else(bad)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (ip, after) = v6.split_once(']').ok_or_else(bad)?;
        ip.parse::<Ipv6Addr>().map_err(|_| bad())?;
        (ip, after.strip_prefix(':'))
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let db_ok = path.is_empty() || path == "/" || path[1..].parse::<u32>().is_ok();
    if host_ok && port_ok && db_ok && !tail.starts_with('#') {
        Ok(())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        for ok in [
            "redis://127.0.0.1:6379/0",
            "redis://localhost",
            "rediss://user:p%40ss@cache.internal:6380/2",
            "redis://:secret@[::1]:6379",
            "redis://h/",
            "redis://h:6379/0?protocol=resp3",
        ] {
            assert_eq!(check_redis_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://h:6379",
            "redis://",
            "redis://h:port",
            "redis://h:6379/db",
            "redis://[::1:6379",
            "127.0.0.1:6379",
        ] {
            assert!(check_redis_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_redis_url("redis://u:hunter2@h:x"),
            Err("expected a redis:// or rediss:// URL like \"redis://127.0.0.1:6379/0\", got \"redis://u:***@h:x\"".into())
        );
    }
}
