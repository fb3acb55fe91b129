//! A limit's `cost:`: units per request, or an estimate reserved at
//! admission and settled from the response (docs/configuration/cost.md),
//! each field checked at its own line.

use std::time::Duration;

use super::{Ctx, Result};
use crate::config::cost::{
    CostConfig, LlmCost, OnMissingUsage, OnUpstreamError, Reserve, Settle, StreamUsage,
};
use crate::config::raw::{AlgorithmKind, NumberOrWord, RawCost, RawCostSpec, RawLlmCost};

/// `settle_within`'s default.
const SETTLE_WITHIN: Duration = Duration::from_secs(15 * 60);

impl Ctx<'_> {
    /// The `cost` of a `kind` limit at `path`: the units a request takes
    /// (the least an estimate is), and the reserve/settle spec if any.
    pub(super) fn cost(
        &self,
        path: &str,
        kind: AlgorithmKind,
        raw: Option<&RawCost>,
    ) -> Result<(u64, Option<CostConfig>)> {
        let field = format!("{path}.cost");
        match raw {
            None => Ok((1, None)),
            Some(RawCost::Units(n)) => Ok((self.at_least_one(&field, Some(*n), 1)?, None)),
            Some(RawCost::Spec(_))
                if matches!(kind, AlgorithmKind::Concurrency | AlgorithmKind::SlidingLog) =>
            {
                Err(self.err(
                    &field,
                    format!(
                        "{} takes no reserve/settle cost (a slot, or a log entry per unit, has no estimate to correct); give a whole number",
                        kind.name()
                    ),
                ))
            }
            Some(RawCost::Spec(spec)) => {
                let cost = self.cost_spec(&field, spec)?;
                let least = match cost.reserve {
                    Reserve::Units(n) => n,
                    _ => 1,
                };
                Ok((least, Some(cost)))
            }
        }
    }

    /// `cost: { ... }` at `field`.
    fn cost_spec(&self, field: &str, raw: &RawCostSpec) -> Result<CostConfig> {
        let at = |name: &str| format!("{field}.{name}");
        let reserve = match &raw.reserve {
            None => return Err(self.err(field, "missing field `reserve`")),
            Some(NumberOrWord::Number(n)) => {
                Reserve::Units(self.at_least_one(&at("reserve"), Some(*n), 1)?)
            }
            Some(NumberOrWord::Word(w)) => match w.as_str() {
                "llm" => Reserve::Llm,
                "request_bytes" => Reserve::RequestBytes,
                _ => match w.strip_prefix("header:") {
                    Some(name) => Reserve::Header(self.header_name(&at("reserve"), name)?),
                    None => {
                        return Err(self.err(
                            &at("reserve"),
                            format!("reserve is llm, a whole number, header:NAME or request_bytes, got \"{w}\""),
                        ))
                    }
                },
            },
        };
        let settle = match raw.settle.as_deref() {
            None | Some("none") => Settle::None,
            Some("llm_usage") => Settle::LlmUsage,
            Some("response_bytes") => Settle::ResponseBytes,
            Some(w) => match (w.strip_prefix("header:"), w.strip_prefix("trailer:")) {
                (Some(name), _) => Settle::Header(self.header_name(&at("settle"), name)?),
                (_, Some(name)) => Settle::Trailer(self.header_name(&at("settle"), name)?),
                _ => {
                    return Err(self.err(
                        &at("settle"),
                        format!("settle is llm_usage, header:NAME, trailer:NAME, response_bytes or none, got \"{w}\""),
                    ))
                }
            },
        };
        let wants_llm = reserve == Reserve::Llm || settle == Settle::LlmUsage;
        let llm = match (&raw.llm, wants_llm) {
            (Some(l), true) => Some(self.llm_cost(&at("llm"), l)?),
            (None, true) => return Err(self.err(
                field,
                "missing field `llm` (its `api`), which reserve: llm and settle: llm_usage need",
            )),
            (Some(_), false) => {
                return Err(self.err(
                    &at("llm"),
                    "llm applies only with reserve: llm or settle: llm_usage",
                ))
            }
            (None, false) => None,
        };
        if settle == Settle::None {
            for (name, given) in [
                ("on_missing_usage", raw.on_missing_usage.is_some()),
                ("on_upstream_error", raw.on_upstream_error.is_some()),
                ("settle_within", raw.settle_within.is_some()),
            ] {
                if given {
                    return Err(self.err(
                        &at(name),
                        format!("{name} applies only with a `settle` (this cost never settles)"),
                    ));
                }
            }
        }
        let settle_within = raw.settle_within.map_or(SETTLE_WITHIN, |d| d.0);
        if settle_within.is_zero() {
            return Err(self.err(&at("settle_within"), "settle_within must be greater than 0"));
        }
        Ok(CostConfig {
            reserve,
            settle,
            llm,
            on_missing_usage: raw.on_missing_usage.unwrap_or(OnMissingUsage::KeepEstimate),
            on_upstream_error: raw.on_upstream_error.unwrap_or(OnUpstreamError::Refund),
            settle_within,
        })
    }

    /// `cost.llm` at `field`.
    fn llm_cost(&self, field: &str, raw: &RawLlmCost) -> Result<LlmCost> {
        let at = |name: &str| format!("{field}.{name}");
        let api = raw.api.ok_or_else(|| {
            self.err(
                field,
                "missing field `api` (openai, openai_chat, openai_completions, openai_responses, openai_embeddings or anthropic)",
            )
        })?;
        let stream_usage = raw.stream_usage.unwrap_or(StreamUsage::AsSent);
        if stream_usage == StreamUsage::Force && !api.may_force_usage() {
            return Err(self.err(
                &at("stream_usage"),
                "stream_usage: force applies to api: openai, openai_chat and openai_completions (responses and Anthropic streams always carry their usage; embeddings do not stream)",
            ));
        }
        Ok(LlmCost {
            api,
            other_requests: raw.other_requests.unwrap_or(0),
            default_max_output: self.at_least_one(
                &at("default_max_output"),
                raw.default_max_output,
                1024,
            )?,
            bytes_per_token: self.at_least_one(&at("bytes_per_token"), raw.bytes_per_token, 1)?,
            cap_output: raw.cap_output.unwrap_or(false),
            stream_usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, CostConfig, LlmApi, OnMissingUsage, Reserve, Settle};

    fn cost(algorithm: &str, cost: &str) -> Result<Option<CostConfig>, (String, String)> {
        let params = match algorithm {
            "token_bucket" | "gcra" | "leaky_bucket" => "rate: 100/s",
            "concurrency" => "limit: 5",
            _ => "limit: 10000, window: 1h",
        };
        let text = format!("limits:\n  t: {{ algorithm: {algorithm}, {params}, cost: {cost} }}\n");
        parse(&text, "gateway.yaml")
            .map(|l| l.config.limits[0].metered.clone())
            .map_err(|e| (e.field, e.message))
    }

    #[test]
    fn a_cost_spec_with_its_defaults() {
        let c = cost(
            "fixed_window",
            "{ reserve: llm, settle: llm_usage, llm: { api: openai } }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.reserve.clone(), c.settle.clone()),
            (Reserve::Llm, Settle::LlmUsage)
        );
        let llm = c.llm.unwrap();
        assert_eq!((llm.api, llm.other_requests), (LlmApi::Openai, 0));
        for (written, api) in [
            ("openai_chat", LlmApi::OpenaiChat),
            ("openai_completions", LlmApi::OpenaiCompletions),
            ("openai_responses", LlmApi::OpenaiResponses),
            ("openai_embeddings", LlmApi::OpenaiEmbeddings),
            ("anthropic", LlmApi::Anthropic),
            ("anthropic_messages", LlmApi::Anthropic),
        ] {
            let spec = format!("{{ reserve: llm, llm: {{ api: {written}, other_requests: 3 }} }}");
            let llm = cost("fixed_window", &spec).unwrap().unwrap().llm.unwrap();
            assert_eq!((llm.api, llm.other_requests), (api, 3), "{written}");
        }
        assert_eq!(
            (llm.default_max_output, llm.bytes_per_token, llm.cap_output),
            (1024, 1, false)
        );
        assert_eq!(c.on_missing_usage, OnMissingUsage::KeepEstimate);
        assert_eq!(c.settle_within.as_secs(), 900);
        assert!(c.overspend().is_some(), "no cap_output: not a bound");
        let c = cost(
            "token_bucket",
            "{ reserve: request_bytes, settle: response_bytes }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.unit(), crate::config::CostUnit::Bytes);
        let c = cost(
            "gcra",
            "{ reserve: \"header:x-units\", settle: \"trailer:x-used\" }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.reserve, Reserve::Header("x-units".parse().unwrap()));
        assert_eq!(cost("fixed_window", "3"), Ok(None));
        let c = cost(
            "sliding_window",
            "{ reserve: llm, settle: llm_usage, llm: { api: anthropic, cap_output: true } }",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.overspend(), None, "a true bound");
    }

    /// Why one function: one table, a row per mistake, each with the
    /// field and message it must give.
    #[test]
    fn cost_mistakes_at_their_field() {
        let cases = [
            (
                "concurrency",
                "{ reserve: 5 }",
                "limits.t.cost",
                "concurrency takes no reserve/settle cost",
            ),
            (
                "sliding_log",
                "{ reserve: 5 }",
                "limits.t.cost",
                "sliding_log takes no reserve/settle cost",
            ),
            (
                "fixed_window",
                "{ settle: none }",
                "limits.t.cost",
                "missing field `reserve`",
            ),
            (
                "fixed_window",
                "{ reserve: lots }",
                "limits.t.cost.reserve",
                "reserve is llm, a whole number",
            ),
            (
                "fixed_window",
                "{ reserve: 0 }",
                "limits.t.cost.reserve",
                "at least 1",
            ),
            (
                "fixed_window",
                "{ reserve: 20000 }",
                "limits.t.cost",
                "more than the limit's capacity",
            ),
            (
                "fixed_window",
                "{ reserve: 5, settle: tokens }",
                "limits.t.cost.settle",
                "settle is llm_usage",
            ),
            (
                "fixed_window",
                "{ reserve: llm }",
                "limits.t.cost",
                "missing field `llm`",
            ),
            (
                "fixed_window",
                "{ reserve: 5, llm: { api: openai } }",
                "limits.t.cost.llm",
                "applies only with",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: {} }",
                "limits.t.cost.llm",
                "missing field `api`",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: { api: gemini } }",
                "limits.t.cost.llm.api",
                "unknown variant `gemini`",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: { api: anthropic, stream_usage: force } }",
                "limits.t.cost.llm.stream_usage",
                "applies to api: openai",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: { api: openai_embeddings, stream_usage: force } }",
                "limits.t.cost.llm.stream_usage",
                "applies to api: openai",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: { api: openai, other_requests: 10001 } }",
                "limits.t.cost.llm.other_requests",
                "more than the limit's capacity 10000",
            ),
            (
                "fixed_window",
                "{ reserve: llm, llm: { api: openai, bytes_per_token: 0 } }",
                "limits.t.cost.llm.bytes_per_token",
                "at least 1",
            ),
            (
                "fixed_window",
                "{ reserve: 5, on_missing_usage: charge_zero }",
                "limits.t.cost.on_missing_usage",
                "applies only with a `settle`",
            ),
            (
                "fixed_window",
                "{ reserve: 5, settle: response_bytes, settle_within: 0s }",
                "limits.t.cost.settle_within",
                "greater than 0",
            ),
            (
                "fixed_window",
                "{ reserve: \"header:bad name\" }",
                "limits.t.cost.reserve",
                "not a valid header name",
            ),
            (
                "fixed_window",
                "{ reserve: 5, refund: true }",
                "limits.t.cost",
                "unknown field `refund`",
            ),
        ];
        for (algorithm, written, field, message) in cases {
            let (f, m) = cost(algorithm, written).expect_err(written);
            assert_eq!(f, field, "{written}: {m}");
            assert!(m.contains(message), "{written}: {m}");
        }
    }
}
