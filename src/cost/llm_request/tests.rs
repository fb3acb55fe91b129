use super::*;
use proptest::prelude::*;

fn parse(api: Api, body: &str) -> Result<LlmRequest, InvalidLlmRequest> {
    LlmRequest::parse(api, body.as_bytes(), 1, 1000)
}

fn rewrite(api: Api, body: &str, rw: Rewrite) -> (String, bool) {
    let req = parse(api, body).unwrap();
    let out = req.rewrite(&Bytes::copy_from_slice(body.as_bytes()), rw);
    (
        String::from_utf8(out.body.to_vec()).unwrap(),
        out.usage_added,
    )
}

const CAP: Rewrite = Rewrite {
    cap_output: true,
    force_stream_usage: false,
};
const FORCE: Rewrite = Rewrite {
    cap_output: false,
    force_stream_usage: true,
};

#[test]
fn a_body_that_is_no_request_is_refused_with_a_reason() {
    let cases = [
        ("", "the body is not a JSON object"),
        ("  [1]", "the body is not a JSON object"),
        ("\"x\"", "the body is not a JSON object"),
        ("null", "the body is not a JSON object"),
        ("{\"model\":\"m\"", "the body is not valid JSON: EOF"),
        (
            "{\"model\":\"m\"} x",
            "the body is not valid JSON: trailing characters",
        ),
        ("{\"messages\":[]}", "`model`: the body names no model"),
        ("{\"model\":\"\"}", "`model`: the body names no model"),
        ("{\"model\":null}", "`model`: the body names no model"),
        ("{\"model\":5}", "`model` is not a string"),
        (
            "{\"model\":\"a\",\"model\":\"b\"}",
            "the body is not a valid request: duplicate field `model`",
        ),
        (
            "{\"model\":\"m\",\"messages\":[],\"stream\":\"yes\"}",
            "`stream` is not true or false",
        ),
        (
            "{\"model\":\"m\",\"messages\":[],\"max_completion_tokens\":-1}",
            "`max_completion_tokens` is not a whole number",
        ),
        (
            "{\"model\":\"m\",\"messages\":[],\"max_completion_tokens\":1.5}",
            "`max_completion_tokens` is not a whole number",
        ),
        (
            "{\"model\":\"m\"}",
            "`messages` is missing: an openai_chat request names its messages",
        ),
        (
            "{\"model\":\"m\",\"messages\":\"hi\"}",
            "`messages` is not an array",
        ),
        (
            "{\"model\":\"m\",\"messages\":[],\"max_tokens\":\"9\"}",
            "`max_tokens` is not a whole number",
        ),
        ("{\"model\":\"m\",\"messages\":[],\"n\":0}", "`n` is 0"),
        (
            "{\"model\":\"m\",\"messages\":[],\"n\":\"2\"}",
            "`n` is not a whole number",
        ),
    ];
    for (body, reason) in cases {
        let err = parse(Api::OpenAiChat, body).unwrap_err();
        assert!(err.reason().starts_with(reason), "{body}: {}", err.reason());
    }
    assert_eq!(InvalidLlmRequest::CODE, "invalid_llm_request");
}

#[test]
fn the_estimate_is_body_bytes_per_token_rounded_up_plus_max_output() {
    // 100 bytes with `max_tokens: 50`: the issue's example, 150 tokens.
    let body = format!(
        "{{\"model\":\"gpt-4o-mini\",\"max_tokens\":50,\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "a".repeat(19)
    );
    assert_eq!(body.len(), 100);
    let req = LlmRequest::parse(Api::OpenAiChat, body.as_bytes(), 1, 1000).unwrap();
    assert_eq!(
        (req.prompt_estimate(), req.output_reserved(), req.estimate()),
        (100, 50, 150)
    );
    for (bpt, prompt) in [(3, 34), (4, 25), (100, 1), (1000, 1), (0, 100)] {
        let req = LlmRequest::parse(Api::OpenAiChat, body.as_bytes(), bpt, 1000).unwrap();
        assert_eq!(req.estimate(), prompt + 50, "bytes_per_token {bpt}");
    }
    let req = LlmRequest::parse(Api::OpenAiResponses, b"{\"model\":\"m\"}", 1, 1000).unwrap();
    assert_eq!((req.max_output(), req.estimate()), (None, 13 + 1000));
    let huge = LlmRequest::parse(
        Api::OpenAiResponses,
        b"{\"model\":\"m\",\"max_output_tokens\":18446744073709551615}",
        1,
        0,
    );
    assert_eq!(huge.unwrap().estimate(), u64::MAX);
}

#[test]
fn every_choice_of_a_chat_completion_is_reserved_its_max_output() {
    let body = r#"{"model":"m","messages":[],"n":3,"max_tokens":50}"#;
    let req = parse(Api::OpenAiChat, body).unwrap();
    let want = (3, 50, 150, body.len() as u64 + 150);
    assert_eq!(
        (
            req.choices(),
            req.output_cap(),
            req.output_reserved(),
            req.estimate()
        ),
        want
    );
    let req = parse(Api::OpenAiChat, r#"{"model":"m","messages":[],"n":2}"#).unwrap();
    assert_eq!(
        (req.choices(), req.output_cap(), req.output_reserved()),
        (2, 1000, 2000)
    );
    // `n` means nothing to the other APIs.
    for (api, body) in [
        (Api::OpenAiResponses, r#"{"model":"m","input":"x","n":3}"#),
        (
            Api::AnthropicMessages,
            r#"{"model":"m","messages":[],"n":3}"#,
        ),
    ] {
        assert_eq!(parse(api, body).unwrap().output_reserved(), 1000, "{body}");
    }
    let many = r#"{"model":"m","messages":[],"n":4294967296,"max_tokens":4294967296}"#;
    assert_eq!(
        parse(Api::OpenAiChat, many).unwrap().output_reserved(),
        u64::MAX
    );
}

#[test]
fn each_api_reads_its_own_max_output_fields() {
    let cases = [
        // Chat completions: either field, the larger when both.
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_tokens":10}"#,
            Some(10),
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_completion_tokens":20}"#,
            Some(20),
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_completion_tokens":20,"max_tokens":30}"#,
            Some(30),
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_output_tokens":40}"#,
            None,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"max_tokens":null}"#,
            None,
        ),
        // Legacy completions: max_tokens only.
        (
            Api::OpenAiCompletions,
            r#"{"model":"m","prompt":"hi","max_tokens":15}"#,
            Some(15),
        ),
        (
            Api::OpenAiCompletions,
            r#"{"model":"m","prompt":"hi","max_completion_tokens":15}"#,
            None,
        ),
        // Responses: max_output_tokens only, whatever else the body has.
        (
            Api::OpenAiResponses,
            r#"{"model":"m","input":"hi","max_output_tokens":40}"#,
            Some(40),
        ),
        (
            Api::OpenAiResponses,
            r#"{"model":"m","input":"hi","max_tokens":40}"#,
            None,
        ),
        (
            Api::OpenAiResponses,
            r#"{"model":"m","messages":[],"max_completion_tokens":100,"max_output_tokens":1500}"#,
            Some(1500),
        ),
        // Anthropic messages: max_tokens only.
        (
            Api::AnthropicMessages,
            r#"{"model":"m","messages":[],"max_tokens":50}"#,
            Some(50),
        ),
        (
            Api::AnthropicMessages,
            r#"{"model":"m","messages":[],"max_completion_tokens":50}"#,
            None,
        ),
    ];
    for (api, body, max) in cases {
        let req = parse(api, body).unwrap();
        assert_eq!((req.api(), req.max_output()), (api, max), "{body}");
        assert_eq!(req.output_reserved(), max.unwrap_or(1000), "{body}");
        assert_eq!(req.model(), "m");
    }
}

#[test]
fn a_legacy_completion_reserves_every_prompt_times_n_and_best_of() {
    let cases = [
        (r#"{"model":"m","prompt":"hi","max_tokens":1500}"#, 1, 1500),
        (r#"{"model":"m","max_tokens":10}"#, 1, 10),
        (r#"{"model":"m","prompt":[1,2,3],"max_tokens":10}"#, 1, 10),
        (
            r#"{"model":"m","prompt":["a","b","c"],"max_tokens":10}"#,
            3,
            30,
        ),
        (
            r#"{"model":"m","prompt":[[1],[2,3]],"max_tokens":10}"#,
            2,
            20,
        ),
        (
            r#"{"model":"m","prompt":"hi","n":2,"max_tokens":10}"#,
            2,
            20,
        ),
        (
            r#"{"model":"m","prompt":"hi","n":2,"best_of":5,"max_tokens":10}"#,
            5,
            50,
        ),
        (
            r#"{"model":"m","prompt":["a","b"],"n":3,"best_of":2,"max_tokens":10}"#,
            6,
            60,
        ),
        (r#"{"model":"m","prompt":"hi"}"#, 1, 1000),
    ];
    for (body, choices, output) in cases {
        let req = parse(Api::OpenAiCompletions, body).unwrap();
        assert_eq!(
            (req.choices(), req.output_reserved(), req.estimate()),
            (choices, output, body.len() as u64 + output),
            "{body}"
        );
    }
    let refused = [
        (r#"{"model":"m","prompt":[]}"#, "`prompt` is an empty array"),
        (
            r#"{"model":"m","prompt":["a",1]}"#,
            "`prompt` is not a string",
        ),
        (
            r#"{"model":"m","prompt":{"text":"a"}}"#,
            "`prompt` is not a string",
        ),
        (r#"{"model":"m","prompt":5}"#, "`prompt` is not a string"),
        (
            r#"{"model":"m","prompt":"a","best_of":0}"#,
            "`best_of` is 0",
        ),
        (
            r#"{"model":"m","prompt":"a","n":-1}"#,
            "`n` is not a whole number",
        ),
    ];
    for (body, reason) in refused {
        let err = parse(Api::OpenAiCompletions, body).unwrap_err();
        assert!(err.reason().starts_with(reason), "{body}: {}", err.reason());
    }
}

#[test]
fn embeddings_reserve_their_input_and_no_output() {
    for body in [
        r#"{"model":"text-embedding-3-small","input":"hello"}"#,
        r#"{"model":"e","input":["a","b"],"max_tokens":5000,"n":9}"#,
        r#"{"model":"e","input":[[1,2],[3]],"stream":"whatever"}"#,
    ] {
        let req = parse(Api::OpenAiEmbeddings, body).unwrap();
        assert_eq!(
            (req.output_reserved(), req.estimate(), req.stream()),
            (0, body.len() as u64, false),
            "{body}"
        );
        assert_eq!(
            rewrite(Api::OpenAiEmbeddings, body, CAP),
            (body.to_string(), false)
        );
    }
    for (body, reason) in [
        (r#"{"model":"e"}"#, "`input` is missing"),
        (
            r#"{"model":"e","input":[]}"#,
            "`input` is not a string or a non-empty array",
        ),
        (
            r#"{"model":"e","input":7}"#,
            "`input` is not a string or a non-empty array",
        ),
    ] {
        let err = parse(Api::OpenAiEmbeddings, body).unwrap_err();
        assert!(err.reason().starts_with(reason), "{body}: {}", err.reason());
    }
}

#[test]
fn a_body_is_read_as_the_configured_api_never_as_its_shape_suggests() {
    // The issue's cases: a completions body read as completions, a
    // responses body with `messages` read as responses.
    let completions = r#"{"model":"m","prompt":"hi","max_tokens":1500}"#;
    let req = parse(Api::OpenAiCompletions, completions).unwrap();
    assert_eq!(req.estimate(), completions.len() as u64 + 1500);
    let responses =
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_output_tokens":1500}"#;
    let req = parse(Api::OpenAiResponses, responses).unwrap();
    assert_eq!(req.estimate(), responses.len() as u64 + 1500);
    assert_eq!(
        rewrite(Api::OpenAiResponses, responses, CAP),
        (responses.to_string(), false)
    );
    // A completions body sent to a chat API names no messages: refused.
    assert!(parse(Api::OpenAiChat, completions).is_err());
}

#[test]
fn stream_and_include_usage() {
    let cases = [
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[]}"#,
            false,
            false,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true}"#,
            true,
            false,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#,
            true,
            true,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":false}}"#,
            true,
            false,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":"x"}"#,
            true,
            false,
        ),
        (
            Api::OpenAiResponses,
            r#"{"model":"m","input":[],"stream":true,"stream_options":{"include_usage":true}}"#,
            true,
            false,
        ),
        (
            Api::OpenAiCompletions,
            r#"{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}"#,
            true,
            true,
        ),
        (
            Api::AnthropicMessages,
            r#"{"model":"m","messages":[],"stream":false}"#,
            false,
            false,
        ),
    ];
    for (api, body, stream, usage) in cases {
        let req = parse(api, body).unwrap();
        assert_eq!(
            (req.stream(), req.include_usage()),
            (stream, usage),
            "{body}"
        );
    }
}

#[test]
fn cap_output_adds_the_apis_field_keeping_every_other_byte() {
    let added = [
        (Api::OpenAiChat, "{\n  \"model\": \"m\",\n  \"messages\": [ {\"role\":\"user\",\"content\":\"1.0e2 \\u00e9\"} ]\n}\n", "{\n  \"model\": \"m\",\n  \"messages\": [ {\"role\":\"user\",\"content\":\"1.0e2 \\u00e9\"} ],\"max_completion_tokens\":1000\n}\n"),
        (Api::OpenAiResponses, r#"{"model":"m","input":"hi","temperature":1.0}"#, r#"{"model":"m","input":"hi","temperature":1.0,"max_output_tokens":1000}"#),
        (Api::OpenAiChat, r#"{"model":"m","messages":[],"n":2,"max_tokens":null}"#, r#"{"model":"m","messages":[],"n":2,"max_tokens":null,"max_completion_tokens":1000}"#),
        (Api::OpenAiCompletions, r#"{"model":"m","prompt":"p","max_completion_tokens":5}"#, r#"{"model":"m","prompt":"p","max_completion_tokens":5,"max_tokens":1000}"#),
        // A `null` max takes the value in place: no second member.
        (Api::OpenAiCompletions, r#"{"model":"m","max_tokens":null,"prompt":"p"}"#, r#"{"model":"m","max_tokens":1000,"prompt":"p"}"#),
        (Api::OpenAiChat, r#"{"model":"m","max_completion_tokens" : null,"messages":[]}"#, r#"{"model":"m","max_completion_tokens" : 1000,"messages":[]}"#),
        (Api::AnthropicMessages, r#"{"model":"m","messages":[]}"#, r#"{"model":"m","messages":[],"max_tokens":1000}"#),
        // Another API's field is not this one's.
        (Api::AnthropicMessages, r#"{"model":"m","messages":[],"max_output_tokens":5}"#, r#"{"model":"m","messages":[],"max_output_tokens":5,"max_tokens":1000}"#),
    ];
    for (api, body, want) in added {
        assert_eq!(rewrite(api, body, CAP), (want.to_string(), false), "{body}");
    }
    // A request naming its max output tokens was reserved that much.
    let named = [
        (
            Api::OpenAiChat,
            r#"{"max_tokens":5,"model":"m","messages":[],"max_completion_tokens" : 500 }"#,
        ),
        (
            Api::OpenAiResponses,
            r#"{"model":"m","input":"x","max_output_tokens":77}"#,
        ),
        (
            Api::OpenAiCompletions,
            r#"{"model":"m","prompt":"x","max_tokens":77}"#,
        ),
        (
            Api::AnthropicMessages,
            r#"{"model":"m","max_tok\u0065ns":9000,"messages":[]}"#,
        ),
    ];
    for (api, body) in named {
        assert_eq!(rewrite(api, body, CAP), (body.to_string(), false), "{body}");
    }
}

#[test]
fn force_adds_include_usage_to_streaming_chat_and_completions_only() {
    let added = [
        (
            r#"{"model":"m","messages":[],"stream":true}"#,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#,
        ),
        (
            r#"{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[]}"#,
        ),
        (
            r#"{"model":"m","stream":true,"stream_options":{ },"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true },"messages":[]}"#,
        ),
        (
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
        ),
        (
            r#"{"model":"m","stream":true,"stream_options":null,"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
        ),
    ];
    for (body, want) in added {
        assert_eq!(
            rewrite(Api::OpenAiChat, body, FORCE),
            (want.to_string(), true),
            "{body}"
        );
    }
    assert_eq!(
        rewrite(
            Api::OpenAiCompletions,
            r#"{"model":"m","prompt":"p","stream":true}"#,
            FORCE
        ),
        (
            r#"{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}"#
                .to_string(),
            true
        )
    );
    let untouched = [
        (Api::OpenAiChat, r#"{"model":"m","messages":[]}"#),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":false}"#,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#,
        ),
        (
            Api::OpenAiChat,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":"x"}"#,
        ),
        (
            Api::OpenAiResponses,
            r#"{"model":"m","input":"x","stream":true}"#,
        ),
        (
            Api::OpenAiEmbeddings,
            r#"{"model":"m","input":"x","stream":true}"#,
        ),
        (
            Api::AnthropicMessages,
            r#"{"model":"m","messages":[],"stream":true}"#,
        ),
    ];
    for (api, body) in untouched {
        assert_eq!(
            rewrite(api, body, FORCE),
            (body.to_string(), false),
            "{body}"
        );
    }
}

#[test]
fn both_rewrites_at_once_and_an_unchanged_body_is_the_same_bytes() {
    let body = r#"{"model":"m","messages":[],"stream":true}"#;
    let both = Rewrite {
        cap_output: true,
        force_stream_usage: true,
    };
    assert_eq!(
        rewrite(Api::OpenAiChat, body, both),
        (
            r#"{"model":"m","messages":[],"stream":true,"max_completion_tokens":1000,"stream_options":{"include_usage":true}}"#.to_string(),
            true
        )
    );
    let bytes = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
    let req = LlmRequest::parse(Api::OpenAiChat, &bytes, 1, 1).unwrap();
    let out = req.rewrite(&bytes, Rewrite::default());
    assert_eq!(out.body.as_ptr(), bytes.as_ptr());
}

/// A JSON scalar or small structure, as text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z\\\\\" {}\\[\\]:,é]{0,12}".prop_map(|s| Value::from(s).to_string()),
        Just("null".to_string()),
        Just(r#"{"a":[1,{"b":"}"}],"c":{}}"#.to_string()),
    ]
}

proptest! {
    /// Whatever the other members and blanks, the rewritten body is JSON
    /// whose members are the original ones plus the rewrites, and the
    /// bytes outside the edits are the client's.
    #[test]
    fn rewrites_change_only_their_fields(
        members in proptest::collection::vec(("[a-z_]{1,8}", value()), 0..6),
        blank in "[ \n\t]{0,2}",
        max in proptest::option::of(0u64..5000),
        options in proptest::option::of(Just(r#"{"include_obfuscation":true}"#)),
    ) {
        let reserved = ["model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of", "prompt", "input"];
        let mut parts = vec![r#""model":"m""#.to_string(), r#""messages":[]"#.to_string(), r#""stream":true"#.to_string()];
        let mut seen = std::collections::BTreeSet::new();
        for (k, v) in &members {
            if !reserved.contains(&k.as_str()) && seen.insert(k.clone()) {
                parts.push(format!("\"{k}\"{blank}:{blank}{v}"));
            }
        }
        if let Some(m) = max {
            parts.push(format!(r#""max_tokens":{m}"#));
        }
        if let Some(o) = options {
            parts.push(format!(r#""stream_options":{o}"#));
        }
        let body = format!("{{{blank}{}{blank}}}", parts.join(&format!(",{blank}")));
        let (out, added) = rewrite(Api::OpenAiChat, &body, Rewrite { cap_output: true, force_stream_usage: true });
        prop_assert!(added);
        let before: serde_json::Map<String, Value> = serde_json::from_str(&body).unwrap();
        let after: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
        let mut want = before.clone();
        if max.is_none() {
            want.insert("max_completion_tokens".into(), Value::from(1000));
        }
        let mut opts = before.get("stream_options").cloned().unwrap_or_else(|| serde_json::json!({}));
        opts["include_usage"] = Value::Bool(true);
        want.insert("stream_options".into(), opts);
        prop_assert_eq!(after, want);
        // The client's bytes up to the first edit are untouched.
        let first = body
            .find("\"stream_options\"")
            .unwrap_or(body.len() - 1 - blank.len());
        prop_assert_eq!(&out[..first], &body[..first]);
    }
}
