//! OTLP push: metrics into a real Prometheus 3 through its OTLP receiver,
//! probe spans whose ids are the `traceparent` a real Python SDK server
//! received, and receivers that are down or stall costing probing nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use serde_json::Value;

use crate::support::*;

/// Python SDK servers and Prometheus start in seconds; on a loaded host, more.
const SLOW_START: Duration = Duration::from_secs(30);

/// A fleet of three: a modern stdio server, a degraded legacy one and an
/// HTTP one.
fn fleet(search: &str) -> String {
    format!(
        "{FAST_GLOBAL}servers:\n  \
         - {{id: billing, transport: stdio, command: {demo:?}, args: [--name, billing]}}\n  \
         - {{id: inventory, transport: stdio, command: {demo:?}, args: [--name, inventory, --era, legacy, --status, degraded], labels: {{team: stock}}}}\n  \
         - {{id: search, transport: http, url: {search:?}}}\n",
        demo = demo_server().display(),
    )
}

/// Each server's state as `/health/fleet` says, once none is unknown and
/// (when given) they read `want`, in id order.
async fn settled(mon: &Binary, want: Option<[&str; 3]>) -> Vec<(String, String)> {
    eventually("the fleet settled", SLOW_START, async || {
        let (_, body) = mon.get("/health/fleet").await;
        let v: Value = serde_json::from_str(&body).expect("json");
        let mut states: Vec<(String, String)> = v["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| {
                let field = |k: &str| s[k].as_str().expect(k).to_owned();
                (field("id"), field("status"))
            })
            .collect();
        states.sort();
        let as_wanted = want.is_none_or(|w| states.iter().map(|(_, s)| s.as_str()).eq(w));
        if states.len() == 3 && states.iter().all(|(_, s)| s != "unknown") && as_wanted {
            return Ok(states);
        }
        Err(format!("not settled: {body}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_reach_a_real_prometheus_per_server_and_method_and_agree_with_health() {
    require!(program("prometheus3"));
    let prom = Prometheus::start_otlp_receiver().await;
    let mut search = demo_http(&["--name", "search"], 0).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, fleet(&search.url)).expect("write");
    let endpoint = format!("{}/api/v1/otlp", prom.base());
    let mon = Binary::start(
        &cfg,
        &["--otlp.endpoint", &endpoint, "--otlp.interval", "1s"],
    )
    .await;
    // billing, inventory, search
    settled(&mon, Some(["healthy", "degraded", "healthy"])).await;

    // The conventions' histogram, per server and method, with their attributes.
    let want = [
        ("billing", "server/discover"),
        ("billing", "tools/call"),
        ("inventory", "ping"),
        ("inventory", "tools/call"),
        ("search", "server/discover"),
        ("search", "tools/call"),
    ];
    let series = eventually("every operation in Prometheus", SLOW_START, async || {
        let got = prom
            .query("mcp_client_operation_duration_seconds_count")
            .await;
        let have = |(id, m): &(&str, &str)| {
            got.iter().any(|s| {
                s["metric"]["mcpmon_server_id"] == *id && s["metric"]["mcp_method_name"] == *m
            })
        };
        if want.iter().all(have) {
            return Ok(got);
        }
        Err(format!("missing operations: {got:?}"))
    })
    .await;
    for s in &series {
        let m = &s["metric"];
        let id = m["mcpmon_server_id"].as_str().expect("id");
        let transport = if id == "search" { "tcp" } else { "pipe" };
        assert_eq!(m["network_transport"], transport, "{m}");
        assert!(m["mcp_protocol_version"].is_string(), "{m}");
        assert_eq!(m["job"], "mcpmon", "service.name is the job: {m}");
        if m["mcp_method_name"] == "tools/call" {
            assert_eq!(m["gen_ai_tool_name"], "health_check", "{m}");
        }
        if id == "search" {
            assert_eq!(m["server_address"], "127.0.0.1", "{m}");
            assert!(m["server_port"].is_string(), "{m}");
        }
    }

    // The judgment matches /health/fleet for every server.
    eventually(
        "Prometheus agreeing with /health/fleet",
        SLOW_START,
        async || {
            let now = settled(&mon, None).await;
            let got = prom.query("mcpmon_server_state == 1").await;
            let mut pushed: Vec<(String, String)> = got
                .iter()
                .map(|s| {
                    let l = |k: &str| s["metric"][k].as_str().unwrap_or_default().to_owned();
                    (l("mcpmon_server_id"), l("mcpmon_state"))
                })
                .collect();
            pushed.sort();
            if pushed == now {
                return Ok(());
            }
            Err(format!("pushed {pushed:?}, /health/fleet {now:?}"))
        },
    )
    .await;
    let up = prom.query("mcpmon_server_up").await;
    assert_eq!(up.len(), 3, "{up:?}");
    let labelled = prom
        .query(r#"mcpmon_server_up{mcpmon_label_team="stock"}"#)
        .await;
    assert_eq!(
        labelled.len(),
        1,
        "the operator's labels ride along: {labelled:?}"
    );
    assert!(
        !prom
            .query("mcpmon_server_last_check_timestamp_seconds")
            .await
            .is_empty()
    );
    let (_, m) = mon.get("/metrics").await;
    assert!(
        metric(
            &m,
            r#"mcpmon_otlp_exports_total{result="ok",signal="metrics"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{m}"
    );
    search.kill().await;
}

/// A receiver made for the test: OTLP/HTTP protobuf spans, kept decoded;
/// metrics accepted and ignored.
#[derive(Clone, Default)]
struct SpanSink {
    spans: Arc<Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
}

impl SpanSink {
    async fn start(&self) -> String {
        use axum::routing::post;
        let spans = self.spans.clone();
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                post(move |body: axum::body::Bytes| {
                    let spans = spans.clone();
                    async move {
                        let req = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(body)
                            .expect("an OTLP trace request");
                        let mut kept = spans.lock().expect("spans");
                        for rs in req.resource_spans {
                            for ss in rs.scope_spans {
                                kept.extend(ss.spans);
                            }
                        }
                        ""
                    }
                }),
            )
            .route("/v1/metrics", post(|| async { "" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_span_has_the_trace_and_span_id_the_server_received() {
    require!(installed("tests/python/.venv-modern"));
    let sink = SpanSink::default();
    let endpoint = sink.start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = dir.path().join("traces");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: traced\n    transport: stdio\n    command: {:?}\n    \
             args: [{:?}, stdio]\n    env: {{TRACE_FILE: {:?}}}\n",
            python("modern"),
            python_server().to_str().expect("utf-8"),
            traces.to_str().expect("utf-8"),
        ),
    )
    .expect("write");
    let args = [
        "--otlp.endpoint",
        &endpoint,
        "--otlp.traces.sample-ratio",
        "1",
    ];
    let mon = Binary::start(&cfg, &args).await;
    let (received, span) = eventually(
        "an exported span matching a received traceparent",
        SLOW_START,
        async || {
            let lines: Vec<String> = std::fs::read_to_string(&traces)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            let spans = sink.spans.lock().expect("spans").clone();
            let found = lines.iter().find_map(|tp| {
                let parts: Vec<&str> = tp.split('-').collect();
                let (trace, span) = (*parts.get(1)?, *parts.get(2)?);
                let s = spans
                    .iter()
                    .find(|s| hex(&s.trace_id) == trace && hex(&s.span_id) == span)?;
                Some((tp.clone(), s.clone()))
            });
            if let Some(f) = found {
                return Ok(f);
            }
            Err(format!(
                "no exported span matches a received traceparent: {lines:?}, {} spans",
                spans.len()
            ))
        },
    )
    .await;
    assert!(received.ends_with("-01"), "sampled: {received}");
    assert_eq!(span.name, "tools/call health_check");
    assert_eq!(
        span.kind,
        opentelemetry_proto::tonic::trace::v1::span::SpanKind::Client as i32
    );
    assert!(span.parent_span_id.is_empty(), "a probe's span is a root");
    assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    let attr = |k: &str| {
        span.attributes.iter().find(|a| a.key == k).and_then(|a| {
            match a.value.as_ref()?.value.as_ref()? {
                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s) => {
                    Some(s.clone())
                }
                _ => None,
            }
        })
    };
    assert_eq!(attr("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr("gen_ai.tool.name").as_deref(), Some("health_check"));
    assert_eq!(attr("mcpmon.server.id").as_deref(), Some("traced"));
    assert_eq!(attr("network.transport").as_deref(), Some("pipe"));
    drop(mon);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Resident memory of `pid`, from /proc.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_is_down_or_stalls_costs_bounded_memory_and_no_probe_delay() {
    // A stalling receiver: accepts connections, never reads or answers.
    let stall = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let stall_addr = stall.local_addr().expect("addr");
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = stall.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            held.push(sock);
        }
    });
    let closed = ClosedPort::bind();
    let down = format!("http://127.0.0.1:{}", closed.port());
    for (what, endpoint) in [
        ("stalls", format!("http://{stall_addr}")),
        ("is down", down),
    ] {
        let mut search = demo_http(&["--name", "search"], 0).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("fleet.yaml");
        std::fs::write(&cfg, fleet(&search.url)).expect("write");
        let args = [
            "--otlp.endpoint",
            &endpoint,
            "--otlp.interval",
            "200ms",
            "--otlp.timeout",
            "1s",
            "--otlp.traces.sample-ratio",
            "1",
            "--otlp.traces.queue-size",
            "8",
        ];
        let mon = Binary::start(&cfg, &args).await;
        settled(&mon, None).await;
        // Liveness answers of all three servers: (within 0.5 s, all).
        let pings = |m: &str| -> (f64, f64) {
            let sum = |suffix: &str| -> f64 {
                ["billing", "inventory", "search"]
                    .iter()
                    .filter_map(|id| {
                        let series =
                            format!("mcpmon_ping_duration_seconds_{suffix}").replace("{id}", id);
                        metric(m, &series)
                    })
                    .sum()
            };
            (
                sum(r#"bucket{server="{id}",le="0.5"}"#),
                sum(r#"count{server="{id}"}"#),
            )
        };
        let (_, before) = mon.get("/metrics").await;
        let rss_before = rss_kib(mon.pid());
        let window = Instant::now();
        // Long enough for several timed-out exports and a full span queue.
        eventually(
            &format!("{what}: exports failed and counted"),
            Duration::from_secs(40),
            async || {
                let (_, m) = mon.get("/metrics").await;
                let failed = metric(
                    &m,
                    r#"mcpmon_otlp_exports_total{result="failed",signal="metrics"}"#,
                )
                .unwrap_or(0.0);
                let dropped: f64 = ["queue_full", "export_failed"]
                    .iter()
                    .filter_map(|r| {
                        metric(
                            &m,
                            &format!(r#"mcpmon_otlp_spans_dropped_total{{reason="{r}"}}"#),
                        )
                    })
                    .sum();
                if failed >= 3.0 && dropped >= 1.0 && window.elapsed() >= Duration::from_secs(4) {
                    return Ok(());
                }
                Err(format!("{what}: exports never failed and counted: {m}"))
            },
        )
        .await;
        let (_, after) = mon.get("/metrics").await;
        let elapsed = window.elapsed();
        // Every server keeps its liveness schedule (400 ms) while exports
        // fail, and its answers stay prompt: a push that held probing up
        // would show as pings late by the export timeout (1 s).
        let ((fast0, all0), (fast1, all1)) = (pings(&before), pings(&after));
        let (fast, answered) = (fast1 - fast0, all1 - all0);
        let expected = 3.0 * elapsed.as_secs_f64() / PING_INTERVAL.as_secs_f64();
        assert!(
            answered >= 0.7 * expected,
            "{what}: {answered} liveness answers in {elapsed:?}, expected about {expected}"
        );
        assert!(
            fast >= 0.9 * answered,
            "{what}: only {fast} of {answered} answers within 0.5 s"
        );
        let grown = rss_kib(mon.pid()).saturating_sub(rss_before);
        assert!(
            grown < 32 * 1024,
            "{what}: resident memory grew {grown} KiB"
        );
        drop(mon);
        search.kill().await;
    }
    let n = accepted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (1..200).contains(&n),
        "{n} connections to the stalling receiver"
    );
}

/// An OTLP/gRPC receiver made for the test: the metric names and span
/// names it was sent.
#[derive(Clone, Default)]
struct GrpcSink {
    metrics: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService
    for GrpcSink
{
    async fn export(
        &self,
        req: tonic::Request<
            opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
        >,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse,
        >,
        tonic::Status,
    > {
        let mut kept = self.metrics.lock().expect("metrics");
        for rm in req.into_inner().resource_metrics {
            for sm in rm.scope_metrics {
                kept.extend(sm.metrics.into_iter().map(|m| m.name));
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
    for GrpcSink
{
    async fn export(
        &self,
        req: tonic::Request<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
        >,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let mut kept = self.spans.lock().expect("spans");
        for rs in req.into_inner().resource_spans {
            for ss in rs.scope_spans {
                kept.extend(ss.spans.into_iter().map(|s| s.name));
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_signals_arrive_over_grpc() {
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
    let sink = GrpcSink::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tonic::transport::Server::builder()
        .add_service(MetricsServiceServer::new(sink.clone()))
        .add_service(TraceServiceServer::new(sink.clone()))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - {{id: billing, transport: stdio, command: {:?}}}\n",
            demo_server().display()
        ),
    )
    .expect("write");
    let endpoint = format!("http://{addr}");
    let args = [
        "--otlp.endpoint",
        &endpoint,
        "--otlp.protocol",
        "grpc",
        "--otlp.interval",
        "1s",
        "--otlp.traces.sample-ratio",
        "1",
    ];
    let mon = Binary::start(&cfg, &args).await;
    eventually("metrics and spans over gRPC", SLOW_START, async || {
        let metrics = sink.metrics.lock().expect("metrics").clone();
        let spans = sink.spans.lock().expect("spans").clone();
        let pushed = [
            "mcp.client.operation.duration",
            "mcpmon.server.state",
            "mcpmon.server.up",
        ]
        .iter()
        .all(|n| metrics.iter().any(|m| m == n));
        if pushed && spans.iter().any(|s| s == "tools/call health_check") {
            return Ok(());
        }
        Err(format!("over gRPC: metrics {metrics:?}, spans {spans:?}"))
    })
    .await;
    drop(mon);
}
