//! The LLM side of a request's cost limits: its body read as a request of
//! the API the limit names (the estimate, the `cap_output` and
//! `stream_usage: force` rewrites), or found to be no model call; and the
//! [`Tap`] that reads the response's usage.
//!
//! Which API: the limit's `llm.api`, or with `api: openai` the one the path
//! the request is sent upstream on names
//! ([`cost::Api::of_openai_path`]). What is no model call: a request with
//! no body (a model list, a file download, a delete), or a
//! `multipart/form-data` upload whose body is no JSON object (no server
//! reads a model call out of it); it is charged `llm.other_requests` and
//! settles nothing. Any other body is the API's request, or a 400.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use super::body::Tap;
use crate::config::{CostConfig, LlmCost, Reserve, Settle, StreamUsage};
use crate::cost::{self, LlmRequest, Rewrite, UsageChunkFilter, UsageReader};
use crate::error::GatewayError;
use crate::limit::policy::Policy;

/// What reading the response needs to know of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A model call of `api`.
    Call {
        /// The API it was read as.
        api: cost::Api,
        /// `include_usage` was added: the usage-only chunk is the
        /// gateway's, and does not reach the client.
        usage_added: bool,
        /// Some limit settles from the usage.
        reads_usage: bool,
    },
    /// No model call: charged `other_requests`, nothing to read or settle
    /// from a usage.
    NoCall,
}

impl Seen {
    /// Whether the request is a model call.
    pub fn is_call(self) -> bool {
        matches!(self, Seen::Call { .. })
    }
}

/// A request body read for a route's cost limits.
#[derive(Debug)]
pub struct Read {
    /// Each `reserve: llm` limit's estimate (by index; `None` for the
    /// others).
    pub estimates: Vec<Option<u64>>,
    /// The body to forward (rewritten, for a model call).
    pub body: Bytes,
    /// What reading the response needs.
    pub seen: Seen,
}

/// A request body read for `limits`, sent upstream on `path` with
/// `headers`: each `reserve: llm` limit's estimate (by index; under its
/// own `llm` settings), the body to forward (the first limit with an
/// `llm` block decides the rewrites), and what the response's reading
/// needs. `None` when no limit has an `llm` block.
pub fn read(
    limits: &[Arc<Policy>],
    body: &Bytes,
    path: &str,
    headers: &HeaderMap,
) -> Result<Option<Read>, GatewayError> {
    let Some(first) = limits.iter().find_map(|p| with_llm(p).map(|(_, l)| l)) else {
        return Ok(None);
    };
    if !is_model_call(body, headers) {
        let estimates = limits
            .iter()
            .map(|p| match with_llm(p) {
                Some((c, l)) if c.reserve == Reserve::Llm => Some(l.other_requests),
                _ => None,
            })
            .collect();
        return Ok(Some(Read {
            estimates,
            body: body.clone(),
            seen: Seen::NoCall,
        }));
    }
    let parse = |l: &LlmCost| {
        let Some(api) = l.api.resolve(path) else {
            return Err(GatewayError::InvalidLlmRequest(unknown_path(path).into()));
        };
        LlmRequest::parse(api, body, l.bytes_per_token, l.default_max_output)
            .map_err(|e| GatewayError::InvalidLlmRequest(e.reason().into()))
    };
    let request = parse(&first)?;
    let mut estimates = Vec::with_capacity(limits.len());
    let mut reads_usage = false;
    for p in limits {
        estimates.push(match with_llm(p) {
            Some((c, l)) => {
                reads_usage |= c.settle == Settle::LlmUsage;
                match c.reserve {
                    Reserve::Llm if l == first => Some(request.estimate()),
                    Reserve::Llm => Some(parse(&l)?.estimate()),
                    _ => None,
                }
            }
            None => None,
        });
    }
    let rewrite = Rewrite {
        cap_output: first.cap_output,
        force_stream_usage: first.stream_usage == StreamUsage::Force,
    };
    let rewritten = request.rewrite(body, rewrite);
    Ok(Some(Read {
        estimates,
        body: rewritten.body,
        seen: Seen::Call {
            api: request.api(),
            usage_added: rewritten.usage_added,
            reads_usage,
        },
    }))
}

/// Whether a request with `body` and `headers` is a model call: it has a
/// body, and that body is not a `multipart/form-data` upload (whose
/// bytes, starting with its boundary, are no JSON object: one that starts
/// with `{` is read as a model call whatever its type says, as a lax
/// server would read it).
pub fn is_model_call(body: &[u8], headers: &HeaderMap) -> bool {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let Some(&first) = first else {
        return false;
    };
    let multipart = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"));
    !(multipart && first != b'{')
}

/// Why a body on `path` is refused under `api: openai`.
fn unknown_path(path: &str) -> String {
    format!(
        "the path {path} names no API a token budget reads (with api: openai, a request with a body must go to …/chat/completions, …/completions, …/responses or …/embeddings)"
    )
}

/// A limit's cost spec and its `llm` block, if it has one.
fn with_llm(p: &Policy) -> Option<(&CostConfig, LlmCost)> {
    p.metered.as_ref().and_then(|c| c.llm.map(|l| (c, l)))
}

/// The tap a response to a request `seen` needs: the usage-chunk filter
/// when `include_usage` was added, else a reader when a limit settles from
/// the usage, else none.
pub fn tap(seen: Seen) -> Option<Box<dyn Tap>> {
    let Seen::Call {
        api,
        usage_added,
        reads_usage,
    } = seen
    else {
        return None;
    };
    if usage_added {
        return Some(Box::new(Filtering(UsageChunkFilter::new())));
    }
    reads_usage.then(|| Box::new(Reading(Some(UsageReader::new(api)))) as Box<dyn Tap>)
}

/// Reads the usage, passing every byte.
struct Reading(Option<UsageReader>);

impl Tap for Reading {
    fn push(&mut self, chunk: Bytes) -> Bytes {
        if let Some(reader) = self.0.as_mut() {
            reader.feed(&chunk);
        }
        chunk
    }

    fn finish(&mut self) -> (Bytes, Option<u64>) {
        let usage = self.0.take().and_then(UsageReader::finish);
        (Bytes::new(), usage.map(|u| u.total))
    }

    fn filters(&self) -> bool {
        false
    }
}

/// Removes the usage-only chunk the gateway asked for, reading the usage.
struct Filtering(UsageChunkFilter);

impl Tap for Filtering {
    fn push(&mut self, chunk: Bytes) -> Bytes {
        self.0.push(chunk)
    }

    fn finish(&mut self) -> (Bytes, Option<u64>) {
        let rest = self.0.finish();
        (rest, self.0.usage().map(|u| u.total))
    }

    fn filters(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_body_and_multipart_uploads_are_no_model_calls() {
        let typed = |t: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, t.parse().unwrap());
            h
        };
        let none = HeaderMap::new();
        let multipart = typed("multipart/form-data; boundary=xyz");
        let upper = typed("Multipart/Form-Data ; boundary=xyz");
        let json = typed("application/json");
        let cases: &[(&[u8], &HeaderMap, bool)] = &[
            (b"", &none, false),
            (b" \r\n", &json, false),
            (
                b"--xyz\r\nContent-Disposition: form-data",
                &multipart,
                false,
            ),
            (b"--xyz\r\n", &upper, false),
            // A JSON object is read as a model call whatever its type says.
            (b"{\"model\":\"m\"}", &multipart, true),
            (b" {}", &upper, true),
            (b"--xyz", &none, true),
            (b"--xyz", &json, true),
            (b"x", &typed("text/plain"), true),
        ];
        for (body, headers, call) in cases {
            assert_eq!(
                is_model_call(body, headers),
                *call,
                "{:?} {:?}",
                String::from_utf8_lossy(body),
                headers.get("content-type")
            );
        }
    }
}
