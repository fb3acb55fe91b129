//! W3C Trace Context through the gateway, with `telemetry` absent
//! (docs/traces.md): an incoming `traceparent` continued with the
//! gateway's own span id, one started when there is none or it is
//! malformed (never forwarded as sent), `tracestate` with it, and the
//! trace id in the access log.

mod common;

use common::client::{self, Proto};
use common::{Echo, OneRoute};
use http::Request;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A `traceparent` value's four fields.
fn fields(v: &str) -> Vec<String> {
    v.split('-').map(str::to_string).collect()
}

/// Sends `GET path` with `headers` over `proto`; returns what the upstream
/// saw of `traceparent` and `tracestate`, and the access log's trace id.
async fn through(
    gw: &common::Gateway,
    echo: &Echo,
    proto: Proto,
    path: &str,
    headers: &[(&str, &str)],
) -> (Vec<String>, Vec<String>, String, String) {
    let uri = match proto {
        Proto::H1 => path.to_string(),
        Proto::H2c => format!("http://{}{path}", gw.addr()),
    };
    let mut req = Request::builder().uri(uri);
    if proto == Proto::H1 {
        req = req.header("host", "gw.example");
    }
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let r = client::send_on_new_conn(gw.addr(), proto, req.body(client::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let seen = echo.last().unwrap();
    assert_eq!(seen.path, path);
    let log = gw.wait_access_log(path, |l| l["path"] == path).await;
    let trace_id = log["trace_id"].as_str().unwrap_or_default().to_string();
    (
        seen.header_all("traceparent"),
        seen.header_all("tracestate"),
        trace_id,
        seen.header("x-request-id").unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incoming_trace_is_continued_with_a_span_of_the_gateway() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    for (n, proto) in [Proto::H1, Proto::H2c].into_iter().enumerate() {
        let sent = format!("00-{TRACE}-{PARENT}-01");
        let path = format!("/continued/{n}");
        let (parent, state, logged, _) = through(
            &gw,
            &echo,
            proto,
            &path,
            &[
                ("traceparent", &sent),
                ("tracestate", "rojo=00f067aa0ba902b7"),
                ("tracestate", "congo=t61rcWkgMzE"),
            ],
        )
        .await;
        assert_eq!(parent.len(), 1, "{proto:?}: one traceparent: {parent:?}");
        let f = fields(&parent[0]);
        assert_eq!(f[0], "00");
        assert_eq!(f[1], TRACE, "{proto:?}: the client's trace");
        assert_eq!(f[2].len(), 16);
        assert_ne!(f[2], PARENT, "{proto:?}: a new span id for the hop");
        assert_ne!(f[2], "0000000000000000");
        assert_eq!(f[3], "01", "{proto:?}: the sampled flag kept");
        assert_eq!(
            state,
            vec!["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".to_string()]
        );
        assert_eq!(logged, TRACE, "{proto:?}: the access log's trace id");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_is_started_when_there_is_none_or_it_is_malformed() {
    let echo = Echo::start("e").await;
    let gw = OneRoute::proxy(&echo).start().await;
    let malformed = [
        format!("00-{TRACE}-{PARENT}-1"),                   // wrong length
        format!("ff-{TRACE}-{PARENT}-01"),                  // version ff
        format!("00-{}-{PARENT}-01", "0".repeat(32)),       // all-zero trace id
        format!("00-{TRACE}-{}-01", "0".repeat(16)),        // all-zero parent id
        format!("00-{TRACE}-{PARENT}-zz"),                  // bad flags
        format!("00-{}-{PARENT}-01", TRACE.to_uppercase()), // upper case
        format!("00-{TRACE}-{PARENT}-01-extra"),            // 00 with more
    ];
    let mut traces = std::collections::HashSet::new();
    for (n, bad) in malformed.iter().map(Some).chain([None]).enumerate() {
        let path = format!("/started/{n}");
        let mut headers = vec![("tracestate", "rojo=1")];
        if let Some(bad) = bad {
            headers.push(("traceparent", bad.as_str()));
        }
        let (parent, state, logged, request_id) =
            through(&gw, &echo, Proto::H1, &path, &headers).await;
        assert_eq!(parent.len(), 1, "{bad:?}: {parent:?}");
        assert_ne!(Some(&parent[0]), bad, "forwarded as sent");
        let f = fields(&parent[0]);
        assert_eq!(f.len(), 4, "{bad:?}: {parent:?}");
        assert_eq!(f[0], "00");
        assert_ne!(f[1], TRACE, "{bad:?}: a new trace");
        assert_ne!(f[1], "0".repeat(32));
        assert!(f[1]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(f[2], "0".repeat(16));
        assert_eq!(f[3], "00", "nothing samples a trace the gateway starts");
        assert!(
            state.is_empty(),
            "{bad:?}: tracestate goes with its traceparent"
        );
        assert_eq!(logged, f[1], "{bad:?}: the access log names the new trace");
        assert_eq!(
            request_id, f[1],
            "{bad:?}: a trace the gateway starts has the id of the request"
        );
        assert!(traces.insert(f[1].clone()), "trace ids repeat");
    }
    // Two traceparent fields are not one.
    let sent = format!("00-{TRACE}-{PARENT}-01");
    let (parent, _, _, _) = through(
        &gw,
        &echo,
        Proto::H1,
        "/two",
        &[("traceparent", &sent), ("traceparent", &sent)],
    )
    .await;
    assert_eq!(parent.len(), 1);
    assert_ne!(fields(&parent[0])[1], TRACE);
}
