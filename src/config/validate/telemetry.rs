//! `telemetry:`: the OTLP collector spans are exported to, the sampling
//! ratio of new traces, and the service name.

use http::uri::{PathAndQuery, Scheme};
use http::Uri;

use super::{Ctx, Result};
use crate::config::model::{OtlpConfig, OtlpProtocol, TelemetryConfig};
use crate::config::raw::RawTelemetry;

/// Where OTLP/HTTP takes traces, added to an endpoint written without a
/// path (as the OpenTelemetry Collector's own `otlphttp` exporter does).
const HTTP_TRACES_PATH: &str = "/v1/traces";

/// Header fields an export's HTTP exchange sets itself.
const EXPORT_HEADERS: [&str; 6] = [
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "te",
];

impl Ctx<'_> {
    /// `telemetry:`.
    pub(super) fn telemetry(&mut self, raw: RawTelemetry) -> Result<TelemetryConfig> {
        let Some(otlp) = raw.otlp else {
            return Err(self.err(
                "telemetry.otlp",
                "required: where to send spans (e.g. otlp: { endpoint: \"http://127.0.0.1:4318\" })",
            ));
        };
        let protocol = otlp.protocol.unwrap_or_default();
        let Some(endpoint) = otlp.endpoint else {
            return Err(self.err("telemetry.otlp.endpoint", "required: the collector's URL"));
        };
        let endpoint = self.endpoint(&endpoint, protocol)?;
        let mut headers = Vec::with_capacity(otlp.headers.0.len());
        for (name, value) in otlp.headers.0 {
            let field = format!("telemetry.otlp.headers.{name}");
            let header = self.header_name(&field, &name)?;
            if EXPORT_HEADERS.contains(&header.as_str()) || header.as_str().starts_with("grpc-") {
                return Err(self.err(
                    &field,
                    format!("\"{header}\" is set by the export itself and cannot be configured"),
                ));
            }
            let value = self.header_value(&field, &value)?;
            headers.push((header, value));
        }
        let sample = raw.sample.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sample) {
            return Err(self.err(
                "telemetry.sample",
                format!("must be between 0 and 1 (the share of new traces recorded), got {sample}"),
            ));
        }
        let service_name = raw.service_name.unwrap_or_else(|| "tollgate".to_owned());
        if service_name.trim().is_empty() {
            return Err(self.err("telemetry.service_name", "must not be empty"));
        }
        Ok(TelemetryConfig {
            otlp: OtlpConfig {
                endpoint,
                protocol,
                headers,
            },
            sample,
            service_name,
        })
    }

    /// `telemetry.otlp.endpoint`: an `http://` URL with a host; for the
    /// `http` protocol, `/v1/traces` when it has no path.
    fn endpoint(&self, text: &str, protocol: OtlpProtocol) -> Result<Uri> {
        let field = "telemetry.otlp.endpoint";
        let uri: Uri = text
            .parse()
            .map_err(|e| self.err(field, format!("\"{text}\" is not a URL: {e}")))?;
        match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => {}
            Some(s) if *s == Scheme::HTTPS => {
                return Err(self.err(
                    field,
                    format!("\"{text}\": TLS to the collector is not supported; send to a collector or agent over http:// (on the host or a private network) that forwards over TLS"),
                ))
            }
            _ => {
                return Err(self.err(
                    field,
                    format!("\"{text}\" must be an http:// URL, such as http://127.0.0.1:4318"),
                ))
            }
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(self.err(field, format!("\"{text}\" has no host")));
        }
        let bare = uri.path_and_query().is_none_or(|p| p.as_str() == "/");
        if protocol == OtlpProtocol::Grpc {
            if !bare {
                return Err(self.err(
                    field,
                    format!("\"{text}\": a gRPC endpoint is an address (scheme, host, port), without a path"),
                ));
            }
            return Ok(uri);
        }
        if !bare {
            return Ok(uri);
        }
        let mut parts = uri.into_parts();
        parts.path_and_query = Some(PathAndQuery::from_static(HTTP_TRACES_PATH));
        Uri::from_parts(parts).map_err(|e| self.err(field, format!("\"{text}\": {e}")))
    }
}
