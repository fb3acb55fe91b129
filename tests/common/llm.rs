//! A mock LLM upstream (hyper 1.x; HTTP/1.1 and h2c on one port) speaking
//! the APIs a cost limit reads, in the shapes of the OpenAI and Anthropic
//! SDKs' types:
//!
//! - `POST /v1/chat/completions`: a `chat.completion` JSON body, or with
//!   `stream: true` SSE chunks ending in `data: [DONE]`; the usage-only
//!   chunk (`choices: []`) only when the request has
//!   `stream_options.include_usage: true`, and then every other chunk
//!   carries `"usage": null`, as OpenAI does;
//! - `POST /v1/responses`: a `response` JSON body, or SSE events from
//!   `response.created` to `response.completed` (`response.incomplete`
//!   when cut at the max output tokens), usage in the last;
//! - `POST /v1/messages`: an Anthropic `message` JSON body, or SSE from
//!   `message_start` (input tokens) to `message_delta` (output tokens) and
//!   `message_stop`;
//! - `POST /v1/completions`: a legacy `text_completion` JSON body, or SSE
//!   chunks as chat's (the usage-only chunk with `include_usage`);
//! - `POST /v1/embeddings`: an embeddings `list` with `prompt_tokens`;
//! - `GET /v1/models`, and any other request without a body: a model list.
//!
//! Each request sets its answer by headers:
//!
//! | header | effect | default |
//! | --- | --- | --- |
//! | `x-mock-input-tokens: N` | the input tokens reported | 10 |
//! | `x-mock-output-tokens: N` | the output tokens reported, at most the request's max output field (then the answer stops for length) | 20 |
//! | `x-mock-ceiling: 1` | spend exactly the request's ceiling: every output as long as the API's max output field lets it (chat: the larger of its two fields; legacy completions: 16 when absent, as OpenAI's default), times `n` (chat), times the prompts and the larger of `n` and `best_of` (legacy completions); input tokens the length of the prompt field's JSON text (`messages`, `prompt`, `input`) | no |
//! | `x-mock-omit-usage: 1` | no usage anywhere (`null` where the API always has the field) | usage |
//! | `x-mock-delay-ms: N` | sleep before the response head | 0 |
//! | `x-mock-chunk-delay-ms: N` | sleep between SSE events | 0 |
//! | `x-mock-status: N` | answer N at once with the API's error body | 200 |
//! | `x-mock-events: N` | content deltas in the stream (or pieces of the JSON text) | 3 |
//! | `x-mock-abort-after: N` | cut the stream (no last chunk) after N events | none |
//! | `x-mock-hold: 1` | after the first event, wait for [`MockLlm::release`] | none |
//! | `x-mock-content-length: 1` | an SSE stream with a `content-length` (some servers buffer it) | chunked |
//!
//! The mock records each request (path, headers, body: to check what the
//! gateway rewrote) and counts response streams: open now, the most open at
//! once, sent whole.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::{Body, BoxError};

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct LlmSeen {
    /// The path, with its query.
    pub path: String,
    /// Header names (lowercase) and values, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body, exactly.
    pub body: Bytes,
}

impl LlmSeen {
    /// The body as JSON; panics if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "request body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    seen: Mutex<Vec<LlmSeen>>,
    /// Tokens the answers reported (input + output), usage or not.
    spent: AtomicUsize,
    open: AtomicUsize,
    peak: AtomicUsize,
    started: AtomicUsize,
    finished: AtomicUsize,
}

/// A running mock LLM upstream; stops (listener and connections) on drop.
pub struct MockLlm {
    addr: SocketAddr,
    state: Arc<State>,
    release: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl MockLlm {
    /// Starts the mock on a free port.
    pub async fn start() -> MockLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind mock LLM");
        let addr = listener.local_addr().expect("mock LLM address");
        let state = Arc::new(State::default());
        let (release, _) = watch::channel(false);
        let (st, rel) = (state.clone(), release.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                while conns.try_join_next().is_some() {}
                let (st, rel) = (st.clone(), rel.clone());
                conns.spawn(async move {
                    let svc = service_fn(move |req| handle(st.clone(), rel.subscribe(), req));
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        MockLlm {
            addr,
            state,
            release,
            task,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<LlmSeen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The last request received.
    pub fn last(&self) -> Option<LlmSeen> {
        self.state.seen.lock().unwrap().last().cloned()
    }

    /// Requests received so far.
    pub fn count(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    /// SSE response bodies open now (started, not yet dropped: a body is
    /// dropped when sent whole or when the connection goes).
    pub fn open_streams(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// The most SSE response bodies open at once so far.
    pub fn peak_streams(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }

    /// SSE response bodies started so far.
    pub fn started_streams(&self) -> usize {
        self.state.started.load(Ordering::SeqCst)
    }

    /// SSE response bodies whose every event was handed to the body (not
    /// cut by `x-mock-abort-after`, nor by a client gone first).
    pub fn finished_streams(&self) -> usize {
        self.state.finished.load(Ordering::SeqCst)
    }

    /// Tokens every answer so far reported spending (input + output),
    /// whether or not the answer carried its usage.
    pub fn spent(&self) -> u64 {
        self.state.spent.load(Ordering::SeqCst) as u64
    }

    /// Lets every stream held by `x-mock-hold` (now and from now on) go on.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a request asked of the mock, from its headers and body.
#[derive(Debug, Clone)]
struct Plan {
    api: Api,
    model: String,
    input: u64,
    output: u64,
    /// The output was cut at the request's max output tokens.
    cut: bool,
    usage: bool,
    include_usage: bool,
    stream: bool,
    events: usize,
    chunk_delay: Duration,
    abort_after: Option<usize>,
    hold: bool,
    /// The stream's length in a `content-length`.
    content_length: bool,
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

impl Plan {
    /// `fields`: the request's max output fields for this API.
    fn new(h: &HeaderMap, body: &Value, api: Api) -> Plan {
        let fields = api.max_output_fields();
        let wanted = header_u64(h, "x-mock-output-tokens").unwrap_or(20);
        let ceiling = h.contains_key("x-mock-ceiling");
        let max = match (ceiling, api) {
            (true, Api::Chat) => fields.iter().filter_map(|f| body[*f].as_u64()).max(),
            (true, Api::Completions) => Some(body["max_tokens"].as_u64().unwrap_or(16)),
            _ => fields.iter().filter_map(|f| body[*f].as_u64()).min(),
        };
        let (input, output) = match ceiling {
            true => {
                let prompt = ["messages", "prompt", "input"]
                    .iter()
                    .find(|f| !body[**f].is_null())
                    .map_or(0, |f| body[*f].to_string().len() as u64);
                let output = match api {
                    Api::Embeddings => 0,
                    _ => max.unwrap_or(wanted) * outputs(api, body),
                };
                (prompt, output)
            }
            false => (
                header_u64(h, "x-mock-input-tokens").unwrap_or(10),
                max.map_or(wanted, |m| m.min(wanted)),
            ),
        };
        Plan {
            api,
            model: body["model"].as_str().unwrap_or("mock").to_string(),
            input,
            output,
            cut: !ceiling && output < wanted,
            usage: !h.contains_key("x-mock-omit-usage"),
            include_usage: body["stream_options"]["include_usage"] == json!(true),
            stream: body["stream"] == json!(true),
            events: header_u64(h, "x-mock-events").unwrap_or(3) as usize,
            chunk_delay: Duration::from_millis(header_u64(h, "x-mock-chunk-delay-ms").unwrap_or(0)),
            abort_after: header_u64(h, "x-mock-abort-after").map(|n| n as usize),
            hold: h.contains_key("x-mock-hold"),
            content_length: h.contains_key("x-mock-content-length"),
        }
    }

    /// The generated text, one piece per content event.
    fn pieces(&self) -> Vec<String> {
        (0..self.events).map(|i| format!("tok{i} ")).collect()
    }
}

/// Which API a path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Completions,
    Responses,
    Embeddings,
    Messages,
}

impl Api {
    /// The API of `path`, if it is one of the mock's.
    fn of(path: &str) -> Option<Api> {
        Some(match path {
            "/v1/chat/completions" => Api::Chat,
            "/v1/completions" => Api::Completions,
            "/v1/responses" => Api::Responses,
            "/v1/embeddings" => Api::Embeddings,
            "/v1/messages" => Api::Messages,
            _ => return None,
        })
    }

    /// The fields the API reads its max output tokens from.
    fn max_output_fields(self) -> &'static [&'static str] {
        match self {
            Api::Chat => &["max_completion_tokens", "max_tokens"],
            Api::Completions | Api::Messages => &["max_tokens"],
            Api::Responses => &["max_output_tokens"],
            Api::Embeddings => &[],
        }
    }
}

/// How many outputs a request asks for: chat's `n`; a legacy completion's
/// prompts times the larger of `n` and `best_of`; else 1.
fn outputs(api: Api, body: &Value) -> u64 {
    let n = body["n"].as_u64().unwrap_or(1);
    match api {
        Api::Chat => n,
        Api::Completions => {
            let prompts = match &body["prompt"] {
                Value::Array(a) if a.iter().all(Value::is_number) => 1,
                Value::Array(a) => a.len() as u64,
                _ => 1,
            };
            prompts * n.max(body["best_of"].as_u64().unwrap_or(1))
        }
        _ => 1,
    }
}

async fn handle(
    st: Arc<State>,
    release: watch::Receiver<bool>,
    req: Request<Incoming>,
) -> Result<Response<Body>, BoxError> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    st.seen.lock().unwrap().push(LlmSeen {
        path: path.clone(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.clone(),
    });
    if let Some(ms) = header_u64(&parts.headers, "x-mock-delay-ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let Some(api) = Api::of(parts.uri.path()) else {
        if body.is_empty() {
            let models = json!({"object": "list", "data": [
                {"id": "mock", "object": "model", "created": 1686935002, "owned_by": "mock"}]});
            return Ok(json_response(StatusCode::OK, models));
        }
        return Ok(json_response(
            StatusCode::NOT_FOUND,
            json!({"error": "no such path"}),
        ));
    };
    if let Some(code) = header_u64(&parts.headers, "x-mock-status") {
        let status = StatusCode::from_u16(code as u16)?;
        let mut error = error_body(api, "mock error");
        if parts.headers.contains_key("x-mock-error-usage") {
            // Some servers report what a failed request used.
            let usage = json!({"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30});
            error["usage"] = usage;
        }
        return Ok(json_response(status, error));
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        let error = error_body(api, "the body is not JSON");
        return Ok(json_response(StatusCode::BAD_REQUEST, error));
    };
    let plan = Plan::new(&parts.headers, &request, api);
    st.spent
        .fetch_add((plan.input + plan.output) as usize, Ordering::SeqCst);
    if !plan.stream || api == Api::Embeddings {
        let body = match api {
            Api::Chat => chat_json(&plan),
            Api::Completions => completion_json(&plan),
            Api::Responses => response_object(&plan, "completed", true),
            Api::Embeddings => embeddings_json(&plan),
            Api::Messages => message_json(&plan),
        };
        return Ok(json_response(StatusCode::OK, body));
    }
    let events = match api {
        Api::Chat | Api::Completions => chat_events(&plan),
        Api::Responses => responses_events(&plan),
        Api::Embeddings | Api::Messages => messages_events(&plan),
    };
    Ok(sse_response(st, release, plan, events))
}

fn json_response(status: StatusCode, v: Value) -> Response<Body> {
    let body = Full::new(Bytes::from(v.to_string()))
        .map_err(|e: Infallible| -> BoxError { match e {} })
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// The API's error body.
fn error_body(api: Api, message: &str) -> Value {
    match api {
        Api::Messages => {
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        }
        _ => {
            json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
        }
    }
}

/// `data: {json}` and a blank line (`event:` first when named).
fn sse(event: Option<&str>, data: &Value) -> Bytes {
    let head = event.map(|e| format!("event: {e}\n")).unwrap_or_default();
    Bytes::from(format!("{head}data: {data}\n\n"))
}

fn chat_usage(p: &Plan) -> Value {
    json!({
        "prompt_tokens": p.input,
        "completion_tokens": p.output,
        "total_tokens": p.input + p.output,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

fn chat_json(p: &Plan) -> Value {
    let mut v = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 1741569952,
        "model": p.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": p.pieces().concat(),
            "refusal": null, "annotations": []}, "logprobs": null,
            "finish_reason": if p.cut { "length" } else { "stop" }}],
        "service_tier": "default", "system_fingerprint": "fp_mock",
    });
    if p.usage {
        v["usage"] = chat_usage(p);
    }
    v
}

fn completion_json(p: &Plan) -> Value {
    let mut v = json!({
        "id": "cmpl-mock", "object": "text_completion", "created": 1589478378,
        "model": p.model, "system_fingerprint": "fp_mock",
        "choices": [{"text": p.pieces().concat(), "index": 0, "logprobs": null,
            "finish_reason": if p.cut { "length" } else { "stop" }}],
    });
    if p.usage {
        v["usage"] = json!({"prompt_tokens": p.input, "completion_tokens": p.output,
            "total_tokens": p.input + p.output});
    }
    v
}

fn embeddings_json(p: &Plan) -> Value {
    let mut v = json!({
        "object": "list", "model": p.model,
        "data": [{"object": "embedding", "embedding": [0.0023, -0.0093, 0.0158], "index": 0}],
    });
    if p.usage {
        v["usage"] = json!({"prompt_tokens": p.input, "total_tokens": p.input});
    }
    v
}

/// Chat completion chunks, or legacy completion chunks (`text` choices).
fn chat_events(p: &Plan) -> Vec<Bytes> {
    let legacy = p.api == Api::Completions;
    let chunk = |delta: Value, finish: Value| {
        let choice = match legacy {
            true => json!({"text": delta["content"].as_str().unwrap_or(""), "index": 0,
                "logprobs": null, "finish_reason": finish}),
            false => json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}),
        };
        let object = if legacy {
            "text_completion"
        } else {
            "chat.completion.chunk"
        };
        let mut c = json!({
            "id": "chatcmpl-mock", "object": object, "created": 1741570283,
            "model": p.model, "system_fingerprint": "fp_mock",
            "choices": [choice],
        });
        if p.include_usage {
            c["usage"] = Value::Null;
        }
        sse(None, &c)
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    out.extend(
        p.pieces()
            .into_iter()
            .map(|t| chunk(json!({"content": t}), Value::Null)),
    );
    out.push(chunk(
        json!({}),
        json!(if p.cut { "length" } else { "stop" }),
    ));
    if p.include_usage && p.usage {
        let last = json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1741570283,
            "model": p.model, "system_fingerprint": "fp_mock", "choices": [],
            "usage": chat_usage(p),
        });
        out.push(sse(None, &last));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

/// A `response` object: `status` completed, incomplete or in_progress.
fn response_object(p: &Plan, status: &str, done: bool) -> Value {
    let status = if done && p.cut { "incomplete" } else { status };
    let output = if done {
        json!([{"id": "msg_mock", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": p.pieces().concat(), "annotations": []}]}])
    } else {
        json!([])
    };
    let usage = if done && p.usage {
        json!({"input_tokens": p.input, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": p.output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": p.input + p.output})
    } else {
        Value::Null
    };
    json!({
        "id": "resp_mock", "object": "response", "created_at": 1741290958, "status": status,
        "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "model": p.model, "output": output, "parallel_tool_calls": true,
        "previous_response_id": null, "store": true, "temperature": 1.0, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage, "metadata": {},
    })
}

fn responses_events(p: &Plan) -> Vec<Bytes> {
    let item = "msg_mock";
    let mut bodies = vec![
        (
            "response.created",
            json!({"response": response_object(p, "in_progress", false)}),
        ),
        (
            "response.in_progress",
            json!({"response": response_object(p, "in_progress", false)}),
        ),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": {"id": item,
            "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        (
            "response.content_part.added",
            json!({"item_id": item, "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    for t in p.pieces() {
        bodies.push((
            "response.output_text.delta",
            json!({"item_id": item, "output_index": 0,
            "content_index": 0, "delta": t}),
        ));
    }
    let text = p.pieces().concat();
    bodies.push((
        "response.output_text.done",
        json!({"item_id": item, "output_index": 0,
        "content_index": 0, "text": text}),
    ));
    let last = response_object(p, "completed", true);
    let kind = if p.cut {
        "response.incomplete"
    } else {
        "response.completed"
    };
    bodies.push((kind, json!({"response": last})));
    bodies
        .into_iter()
        .enumerate()
        .map(|(n, (kind, mut v))| {
            v["type"] = json!(kind);
            v["sequence_number"] = json!(n);
            sse(Some(kind), &v)
        })
        .collect()
}

fn message_json(p: &Plan) -> Value {
    json!({
        "id": "msg_mock", "type": "message", "role": "assistant", "model": p.model,
        "content": [{"type": "text", "text": p.pieces().concat()}],
        "stop_reason": if p.cut { "max_tokens" } else { "end_turn" }, "stop_sequence": null,
        "usage": if p.usage { json!({"input_tokens": p.input, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": p.output, "service_tier": "standard"}) }
            else { Value::Null },
    })
}

fn messages_events(p: &Plan) -> Vec<Bytes> {
    let mut start = json!({"id": "msg_mock", "type": "message", "role": "assistant",
        "content": [], "model": p.model, "stop_reason": null, "stop_sequence": null});
    if p.usage {
        start["usage"] = json!({"input_tokens": p.input, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": 1, "service_tier": "standard"});
    }
    let mut out = vec![
        sse(
            Some("message_start"),
            &json!({"type": "message_start", "message": start}),
        ),
        sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        sse(Some("ping"), &json!({"type": "ping"})),
    ];
    for t in p.pieces() {
        out.push(sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta",
            "index": 0, "delta": {"type": "text_delta", "text": t}}),
        ));
    }
    out.push(sse(
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    let mut delta = json!({"type": "message_delta", "delta": {"stop_reason":
        if p.cut { "max_tokens" } else { "end_turn" }, "stop_sequence": null}});
    if p.usage {
        delta["usage"] = json!({"output_tokens": p.output});
    }
    out.push(sse(Some("message_delta"), &delta));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

/// An SSE response whose events a task sends as the plan says.
fn sse_response(
    st: Arc<State>,
    release: watch::Receiver<bool>,
    plan: Plan,
    events: Vec<Bytes>,
) -> Response<Body> {
    let length: usize = events.iter().map(Bytes::len).sum();
    let content_length = plan.content_length;
    let (tx, rx) = mpsc::channel(1);
    st.started.fetch_add(1, Ordering::SeqCst);
    let open = st.open.fetch_add(1, Ordering::SeqCst) + 1;
    st.peak.fetch_max(open, Ordering::SeqCst);
    tokio::spawn(send_events(st.clone(), release, plan, events, tx));
    let body = EventBody {
        rx,
        _open: OpenStream(st),
    };
    let mut resp = Response::new(body.boxed());
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    if content_length {
        h.insert("content-length", HeaderValue::from(length));
    }
    resp
}

async fn send_events(
    st: Arc<State>,
    mut release: watch::Receiver<bool>,
    plan: Plan,
    events: Vec<Bytes>,
    tx: mpsc::Sender<Result<Bytes, BoxError>>,
) {
    for (i, event) in events.into_iter().enumerate() {
        if plan.abort_after == Some(i) {
            let _ = tx.send(Err("the mock cut the stream".into())).await;
            return;
        }
        if i > 0 && !plan.chunk_delay.is_zero() {
            tokio::time::sleep(plan.chunk_delay).await;
        }
        if i == 1 && plan.hold {
            tokio::select! {
                _ = release.wait_for(|go| *go) => {}
                _ = tx.closed() => return,
            }
        }
        if tx.send(Ok(event)).await.is_err() {
            return;
        }
    }
    st.finished.fetch_add(1, Ordering::SeqCst);
}

/// One open SSE body, counted down when dropped.
struct OpenStream(Arc<State>);
impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The events the sending task hands over, as body frames.
struct EventBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
    _open: OpenStream,
}

impl HttpBody for EventBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx.poll_recv(cx).map(|e| e.map(|r| r.map(Frame::data)))
    }
}
