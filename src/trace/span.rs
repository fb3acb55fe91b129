//! A recorded request's spans (docs/traces.md, "What each span carries"):
//! the request's own span (kind server), one child per upstream attempt
//! (kind client, the span the upstream's `traceparent` names) and one per
//! limit-store call. Only a request whose trace is sampled while
//! `telemetry:` is configured has a [`Recording`]; the others pay for none
//! of this.
//!
//! Children are built as they end; the request's span when its response
//! has ended (with the access-log line), and then all of them go to the
//! export queue together ([`Telemetry::submit`]).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId as OtelSpanId, SpanKind, Status, TraceFlags, TraceId as OtelTraceId,
    TraceState,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::context::{SpanId, TraceContext};
use super::export::Telemetry;

/// What one sampled request records until its response ends.
pub struct Recording {
    /// Where its spans go.
    telemetry: Arc<Telemetry>,
    /// The request span's context (its trace, its own id, sampled).
    context: SpanContext,
    /// The caller's span, for a continued trace.
    parent: Option<OtelSpanId>,
    /// When the request arrived.
    start: SystemTime,
    /// One event per limit decision, in the route's order.
    events: Vec<Event>,
    /// The children that ended (attempts, store calls).
    children: Mutex<Vec<SpanData>>,
    /// Attributes the request span adds to the access-log record's
    /// (`tollgate.store`, `tollgate.store.outcome`).
    extra: Mutex<Vec<KeyValue>>,
}

impl Recording {
    /// The recording of a request in `trace` whose span is `span`, started
    /// now; its spans go to `telemetry`.
    pub fn start(telemetry: Arc<Telemetry>, trace: &TraceContext, span: SpanId) -> Recording {
        let state = trace
            .state
            .as_ref()
            .and_then(|s| s.to_str().ok())
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Recording {
            telemetry,
            context: SpanContext::new(
                OtelTraceId::from_bytes(trace.trace_id.bytes()),
                OtelSpanId::from_bytes(span.0),
                TraceFlags::SAMPLED,
                false,
                state,
            ),
            parent: trace.parent.map(|p| OtelSpanId::from_bytes(p.0)),
            start: SystemTime::now(),
            events: Vec::new(),
            children: Mutex::default(),
            extra: Mutex::default(),
        }
    }

    /// One limit's decision, as an event `limit` on the request's span.
    pub fn limit_decision(&mut self, limit: &str, decision: &'static str, remaining: u64) {
        self.events.push(Event::new(
            "limit",
            SystemTime::now(),
            vec![
                KeyValue::new("tollgate.limit", limit.to_owned()),
                KeyValue::new("tollgate.limit.decision", decision),
                KeyValue::new("tollgate.limit.remaining", remaining as i64),
            ],
            0,
        ));
    }

    /// A limit-store call that just ended after `elapsed`: a child span
    /// `store <backend>`, and the store's outcome on the request's span.
    pub fn store_call(&self, backend: &'static str, ok: bool, elapsed: Duration) {
        let end = SystemTime::now();
        let outcome = if ok { "ok" } else { "error" };
        let mut attributes = vec![
            KeyValue::new("tollgate.store", backend),
            KeyValue::new("tollgate.store.outcome", outcome),
        ];
        if backend == "redis" {
            attributes.push(KeyValue::new("db.system.name", "redis"));
        }
        let status = match ok {
            true => Status::Unset,
            false => Status::error("the limit store did not answer"),
        };
        let child = self.child(
            Cow::Owned(format!("store {backend}")),
            end.checked_sub(elapsed).unwrap_or(end),
            end,
            attributes,
            status,
        );
        self.push(child);
        let mut extra = self.extra.lock().unwrap_or_else(PoisonError::into_inner);
        extra.retain(|kv| !kv.key.as_str().starts_with("tollgate.store"));
        extra.push(KeyValue::new("tollgate.store", backend));
        extra.push(KeyValue::new("tollgate.store.outcome", outcome));
    }

    /// An upstream attempt: a child span of the request's, whose id the
    /// attempt's `traceparent` names. End it with [`Attempt::end`].
    pub fn attempt(&self) -> Attempt {
        Attempt {
            span: SpanId::random(),
            start: SystemTime::now(),
        }
    }

    /// The attempt `attempt` ended: a child span `<name>` with
    /// `attributes`, an error status when `error` says what failed.
    pub fn end_attempt(
        &self,
        attempt: Attempt,
        name: String,
        attributes: Vec<KeyValue>,
        error: Option<&'static str>,
    ) {
        let status = match error {
            Some(what) => Status::error(what),
            None => Status::Unset,
        };
        let mut child = self.child(
            Cow::Owned(name),
            attempt.start,
            SystemTime::now(),
            attributes,
            status,
        );
        child.span_context = SpanContext::new(
            self.context.trace_id(),
            OtelSpanId::from_bytes(attempt.span.0),
            TraceFlags::SAMPLED,
            false,
            self.context.trace_state().clone(),
        );
        self.push(child);
    }

    /// The request's response ended: its span (`name`, `attributes`, an
    /// error status for a 5xx) and its children go to the export queue.
    pub fn finish(self, name: String, mut attributes: Vec<KeyValue>, status: u16) {
        attributes.extend(
            self.extra
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let mut events = SpanEvents::default();
        events.events = self.events;
        let span = SpanData {
            span_context: self.context,
            parent_span_id: self.parent.unwrap_or(OtelSpanId::INVALID),
            parent_span_is_remote: self.parent.is_some(),
            span_kind: SpanKind::Server,
            name: Cow::Owned(name),
            start_time: self.start,
            end_time: SystemTime::now(),
            attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            // Server spans: a 5xx is the server's error, a 4xx the client's.
            status: match status {
                500.. => Status::error(""),
                _ => Status::Unset,
            },
            instrumentation_scope: self.telemetry.scope.clone(),
        };
        let mut spans = self
            .children
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        spans.push(span);
        self.telemetry.submit(spans);
    }

    /// A child of the request's span (a fresh span id; the caller may set
    /// its own).
    fn child(
        &self,
        name: Cow<'static, str>,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<KeyValue>,
        status: Status,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                self.context.trace_id(),
                OtelSpanId::from_bytes(SpanId::random().0),
                TraceFlags::SAMPLED,
                false,
                self.context.trace_state().clone(),
            ),
            parent_span_id: self.context.span_id(),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name,
            start_time: start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.telemetry.scope.clone(),
        }
    }

    fn push(&self, span: SpanData) {
        self.children
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(span);
    }
}

/// An upstream attempt under way: its span id (sent upstream in
/// `traceparent`) and when it started.
pub struct Attempt {
    /// The attempt's span id.
    pub span: SpanId,
    start: SystemTime,
}
