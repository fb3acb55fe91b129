//! `server:`: the listeners (plain and TLS), client addresses, timeouts,
//! sizes, and the rejection response routes inherit.

use std::net::SocketAddr;

use http::HeaderValue;

use super::{status_code, Ctx, Result, SECOND};
use crate::config::consumers::ClientAuthConfig;
use crate::config::model::{CertificateConfig, LimitResponse, ServerConfig, TlsConfig};
use crate::config::raw::{RawLimitResponse, RawServer, RawServerTls};
use crate::config::units::{Addr, Cidr, Size};
use crate::config::Template;

impl Ctx<'_> {
    /// `server:`, with the documented defaults.
    pub(super) fn server(&mut self, raw: RawServer) -> Result<ServerConfig> {
        let (listen, tls) = self.listeners(raw.listen, raw.tls)?;
        let ipv6_prefix = raw.ipv6_prefix.unwrap_or(64);
        if ipv6_prefix > 128 {
            return Err(self.err(
                "server.ipv6_prefix",
                format!("ipv6_prefix must be between 0 and 128, got {ipv6_prefix}"),
            ));
        }
        let timeouts = raw.timeouts.unwrap_or_default();
        let limit_response = match raw.limit_response {
            Some(r) => {
                self.limit_response("server.limit_response", r, &LimitResponse::default())?
            }
            None => LimitResponse::default(),
        };
        let header_read_timeout = self.positive(
            "server.timeouts.header_read",
            timeouts.header_read.map(|d| d.0),
            10 * SECOND,
        )?;
        let idle_timeout = self.positive(
            "server.timeouts.idle",
            timeouts.idle.map(|d| d.0),
            60 * SECOND,
        )?;
        let body_read_timeout = self.positive(
            "server.timeouts.body_read",
            timeouts.body_read.map(|d| d.0),
            30 * SECOND,
        )?;
        let send_timeout = self.positive(
            "server.timeouts.send",
            timeouts.send.map(|d| d.0),
            60 * SECOND,
        )?;
        let max_header_bytes = self.max_header_bytes(raw.max_header_bytes)?;
        let max_body_bytes = raw.max_body_bytes.map(|s| s.0).filter(|n| *n > 0);
        let max_connections =
            self.at_least_one("server.max_connections", raw.max_connections, 10_000)?;
        Ok(ServerConfig {
            listen,
            tls,
            limit_response,
            trusted_proxies: cidrs(raw.trusted_proxies),
            deny: cidrs(raw.deny),
            ipv6_prefix,
            header_read_timeout,
            idle_timeout,
            body_read_timeout,
            send_timeout,
            max_header_bytes,
            max_body_bytes,
            max_connections,
            shutdown_grace: raw.shutdown_grace.map_or(30 * SECOND, |d| d.0),
            escaped_slashes: raw.escaped_slashes.unwrap_or_default(),
        })
    }

    /// `server.listen` and `server.tls`: at least one listener, and no two
    /// that would collide when bound.
    fn listeners(
        &mut self,
        listen: Option<Vec<Addr>>,
        tls: Option<RawServerTls>,
    ) -> Result<(Vec<SocketAddr>, Option<TlsConfig>)> {
        let listen: Vec<SocketAddr> = match listen {
            None => vec![SocketAddr::from(([0, 0, 0, 0], 8080))],
            Some(list) => list.into_iter().map(|a| a.0).collect(),
        };
        let tls = match tls {
            None => None,
            Some(tls) => Some(self.server_tls(tls)?),
        };
        if listen.is_empty() && tls.is_none() {
            return Err(self.err("server.listen", "at least one listener is required"));
        }
        let mut seen: Vec<(String, SocketAddr)> = Vec::new();
        let tls_addrs = tls.iter().flat_map(|t| t.listen.iter().enumerate());
        let all = listen
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("server.listen[{i}]"), *a))
            .chain(tls_addrs.map(|(i, a)| (format!("server.tls.listen[{i}]"), *a)));
        for (field, addr) in all {
            if let Some((other, _)) = seen.iter().find(|(_, a)| overlaps(*a, addr)) {
                return Err(self.err(&field, format!("{addr} is already a listener ({other})")));
            }
            seen.push((field, addr));
        }
        Ok((listen, tls))
    }

    /// `server.tls`: its listeners and certificates (read when the runtime
    /// is built, so a reload re-reads them).
    fn server_tls(&mut self, raw: RawServerTls) -> Result<TlsConfig> {
        let listen: Vec<SocketAddr> = raw
            .listen
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.0)
            .collect();
        if listen.is_empty() {
            return Err(self.err(
                "server.tls.listen",
                "TLS needs at least one listener address",
            ));
        }
        let certificates: Vec<CertificateConfig> = raw
            .certificates
            .unwrap_or_default()
            .into_iter()
            .map(|c| CertificateConfig {
                cert: self.resolve(c.cert),
                key: self.resolve(c.key),
            })
            .collect();
        if certificates.is_empty() {
            return Err(self.err(
                "server.tls.certificates",
                "TLS needs at least one certificate: { cert: FILE, key: FILE }",
            ));
        }
        let client_auth = match raw.client_auth {
            None => None,
            Some(c) => {
                let Some(ca) = c.ca else {
                    return Err(self.err(
                        "server.tls.client_auth.ca",
                        "client_auth needs `ca`: the PEM file of the CA certificates client certificates must chain to",
                    ));
                };
                Some(ClientAuthConfig {
                    ca: self.resolve(ca),
                    required: c.required.unwrap_or(false),
                })
            }
        };
        Ok(TlsConfig {
            listen,
            certificates,
            client_auth,
        })
    }

    /// `server.max_header_bytes`: above zero, and addressable.
    fn max_header_bytes(&self, raw: Option<Size>) -> Result<usize> {
        let max_header = raw.map_or(16 * 1024, |s| s.0);
        if max_header == 0 {
            return Err(self.err(
                "server.max_header_bytes",
                "max_header_bytes must be greater than 0",
            ));
        }
        usize::try_from(max_header)
            .map_err(|_| self.err("server.max_header_bytes", "max_header_bytes is too large"))
    }

    /// A `limit_response` at `path`; what it leaves out comes from `base`
    /// (the server-wide one, or the defaults).
    pub(super) fn limit_response(
        &self,
        path: &str,
        raw: RawLimitResponse,
        base: &LimitResponse,
    ) -> Result<LimitResponse> {
        let status = match raw.status {
            None => base.status,
            Some(status) if (400..=599).contains(&status) => status_code(status),
            Some(status) => {
                return Err(self.err(
                    &format!("{path}.status"),
                    format!("a rejection status must be between 400 and 599, got {status}"),
                ))
            }
        };
        let content_type = match raw.content_type {
            None => base.content_type.clone(),
            Some(ct) => Some(HeaderValue::from_str(ct.trim()).map_err(|_| {
                self.err(
                    &format!("{path}.content_type"),
                    format!("\"{ct}\" is not a valid header value"),
                )
            })?),
        };
        let template = |field: &str, text: Option<String>, base: &Option<Template>| match text {
            None => Ok(base.clone()),
            Some(text) => Template::parse(&text)
                .map(Some)
                .map_err(|m| self.err(&format!("{path}.{field}"), m)),
        };
        Ok(LimitResponse {
            status,
            headers: raw.headers.unwrap_or(base.headers),
            body: template("body", raw.body, &base.body)?,
            locked_body: template("locked_body", raw.locked_body, &base.locked_body)?,
            content_type,
            format: raw.format.unwrap_or(base.format),
        })
    }
}

/// Whether two listen addresses would collide when bound. Port 0 (any free
/// port) never collides; an unspecified IPv6 address covers IPv4 too
/// (dual-stack).
pub(super) fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let (x, y) = (a.ip(), b.ip());
    x == y
        || (x.is_unspecified() && (x.is_ipv6() || y.is_ipv4()))
        || (y.is_unspecified() && (y.is_ipv6() || x.is_ipv4()))
}

/// The networks of `trusted_proxies` or `deny`.
fn cidrs(list: Option<Vec<Cidr>>) -> Vec<ipnet::IpNet> {
    list.unwrap_or_default().into_iter().map(|c| c.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_overlaps() {
        let a = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert!(overlaps(a("0.0.0.0:80"), a("127.0.0.1:80")));
        assert!(overlaps(a("[::]:80"), a("127.0.0.1:80")));
        assert!(!overlaps(a("0.0.0.0:80"), a("[::1]:80")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.2:80")));
        assert!(!overlaps(a("127.0.0.1:0"), a("127.0.0.1:0")));
        assert!(!overlaps(a("127.0.0.1:80"), a("127.0.0.1:81")));
    }
}
