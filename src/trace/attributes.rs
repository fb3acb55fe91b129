//! Span attributes as OTLP writes them (`opentelemetry-proto`'s
//! `KeyValue`): what a request's span (from its access record), its
//! attempts' and its store calls' carry (docs/traces.md).

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

/// An attribute.
pub fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A text attribute.
pub fn text(key: &str, value: &str) -> KeyValue {
    attribute(key, any_value::Value::StringValue(value.to_owned()))
}

/// An integer attribute.
pub fn int(key: &str, value: i64) -> KeyValue {
    attribute(key, any_value::Value::IntValue(value))
}
